"""What an OAUTHBEARER login costs the broker: the client message parsed and its JWT validated (RS256,
2048-bit key, the key held in memory as after a JWKS fetch), per login, on the calling thread, as the
event loop does it (``broker/security/oauthbearer.py``).  Tokens are minted beforehand by the test issuer.

    python bench/oauth_login.py --logins 2000 --repeat 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from broker.security import oauthbearer as O  # noqa: E402
from tests.oauth_issuer import Issuer, client_first_message  # noqa: E402
from tests.unit.test_security_oauthbearer import _keys  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logins", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    issuer = Issuer()
    try:
        validator = O.JwtValidator(_keys(issuer), [issuer.audience], issuer.issuer, 30, "sub", "scope")
        messages = [client_first_message(issuer.token(sub=f"user-{n}")) for n in range(args.logins)]
        runs = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            for m in messages:
                assert O.OAuthBearerServer(validator).evaluate(m) == b""
            runs.append((time.perf_counter() - t0) / len(messages) * 1e6)
        print(f"{args.logins} logins x {args.repeat}: median {statistics.median(runs):.0f} us per login "
              f"(min {min(runs):.0f}, max {max(runs):.0f})")
    finally:
        issuer.close()


if __name__ == "__main__":
    main()
