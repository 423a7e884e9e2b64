FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY broker ./broker
COPY protocol ./protocol
COPY coordinator ./coordinator
RUN pip install --no-cache-dir . && useradd --create-home sharebroker && mkdir /data && chown sharebroker /data
USER sharebroker
EXPOSE 9092
VOLUME ["/data"]
# Listen on all interfaces inside the container; clients reach it through the published port.
ENTRYPOINT ["sharebroker", "--data-dir", "/data", "--listen", "0.0.0.0:9092"]
