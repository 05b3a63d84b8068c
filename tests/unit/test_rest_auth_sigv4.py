"""The test REST catalog's SigV4 check (frazil_dev.rest_auth) refuses what AWS would: it is what
the SigV4 integration tests rely on to tell a signed client from one that is not."""

from __future__ import annotations

import argparse
from email.message import Message

from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]
from botocore.credentials import Credentials  # type: ignore[import-untyped]

from frazil_dev.rest_auth import _State

HOST = "127.0.0.1:8181"
PATH = "/v1/namespaces/db/tables/t"
BODY = b'{"requirements": [], "updates": []}'


def _signed(key: str = "AK", secret: str = "SK", region: str = "eu-west-3", service: str = "execute-api",
            body: bytes = BODY) -> Message:
    request = AWSRequest(method="POST", url=f"http://{HOST}{PATH}", data=body,
                         headers={"Content-Type": "application/json", "Host": HOST})
    SigV4Auth(Credentials(key, secret), service, region).add_auth(request)
    headers = Message()
    for name, value in request.headers.items():
        headers[name] = value
    return headers


def test_only_a_request_signed_with_the_key_for_the_region_and_service_over_this_body_passes() -> None:
    state = _State(argparse.Namespace(sigv4="eu-west-3/execute-api/AK/SK"))
    assert state.check_sigv4("POST", PATH, _signed(), BODY) is None
    assert state.check_sigv4("POST", PATH, _signed(secret="other"), BODY) == "the signature does not verify"
    assert state.check_sigv4("POST", PATH, _signed(key="AK2"), BODY) == "unknown access key 'AK2'"
    assert "signed for us-east-1/execute-api" in str(state.check_sigv4("POST", PATH, _signed(region="us-east-1"),
                                                                      BODY))
    assert "signed for eu-west-3/glue" in str(state.check_sigv4("POST", PATH, _signed(service="glue"), BODY))
    assert state.check_sigv4("POST", PATH, _signed(), BODY + b" ") is not None   # a body changed on the way
    assert state.check_sigv4("POST", PATH + "x", _signed(), BODY) == "the signature does not verify"
    assert state.check_sigv4("DELETE", PATH, _signed(), BODY) == "the signature does not verify"
    unsigned = Message()
    unsigned["Host"] = HOST
    assert state.check_sigv4("POST", PATH, unsigned, BODY) == "no AWS Signature Version 4"
