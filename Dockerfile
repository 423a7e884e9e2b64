FROM python:3.11-slim
WORKDIR /app
# Everything the package declares: pyproject.toml, the README its `readme` field names, and one COPY
# per package of its [tool.setuptools.packages.find] include (tests/integration/test_packaging.py
# installs exactly what these lines copy and runs every console script).
COPY pyproject.toml README.md ./
COPY broker ./broker
COPY protocol ./protocol
COPY coordinator ./coordinator
COPY pipeline ./pipeline
COPY admin ./admin
RUN pip install --no-cache-dir . && useradd --create-home sharebroker && mkdir /data && chown sharebroker /data
USER sharebroker
EXPOSE 9092
VOLUME ["/data"]
# Listen on all interfaces inside the container; clients reach it through the published port.
ENTRYPOINT ["sharebroker", "--data-dir", "/data", "--listen", "0.0.0.0:9092"]
