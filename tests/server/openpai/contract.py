"""OpenPAI's REST API v2 description as a contract (issue #14): every ``/api/v2`` answer a test
sees is validated against ``../shared/compat/pai-support/openpai-rest-api-v2.swagger.yaml``,
with its job-protocol ``$ref`` (a URL) resolved to ``openpai-protocol-v2-schema.yaml`` beside it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from openapi_core import Config, OpenAPI
from openapi_core.datatypes import RequestParameters
from werkzeug.datastructures import Headers, ImmutableMultiDict

SUPPORT = Path(__file__).resolve().parents[4] / "shared" / "compat" / "pai-support"
UNDESCRIBED = Path(__file__).with_name("undescribed-routes.yaml")
EXAMPLE_CODES = frozenset({"NoStorageError", "NoTagError", "NoTaskError", "NoTaskLogError"})
PROTOCOL_REF = (
    "https://raw.githubusercontent.com/microsoft/openpai-protocol/master/schemas/v2/schema.yaml"
)


def _local_refs(node: Any) -> Any:
    """The description with the protocol's URL references made local."""
    if isinstance(node, dict):
        return {
            key: value.replace(PROTOCOL_REF, "")
            if key == "$ref" and isinstance(value, str)
            else _local_refs(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_local_refs(item) for item in node]
    return node


@functools.cache
def description() -> OpenAPI:
    api = yaml.safe_load((SUPPORT / "openpai-rest-api-v2.swagger.yaml").read_text())
    api["paths"].update(yaml.safe_load(UNDESCRIBED.read_text()))  # routes it leaves out
    protocol = yaml.safe_load((SUPPORT / "openpai-protocol-v2-schema.yaml").read_text())
    schemas = api["components"]["schemas"]
    assert schemas["JobProtocol"] == {"$ref": f"{PROTOCOL_REF}#/components/schemas/JobProtocol"}
    del schemas["JobProtocol"]  # only an alias of the protocol's own, which replaces it
    clashes = set(schemas) & set(protocol["components"]["schemas"])
    assert not clashes, f"the protocol's schemas clash with the API's: {clashes}"
    schemas.update(protocol["components"]["schemas"])
    # The description's own error examples use codes its ``Response.code`` list lacks; OpenPAI's
    # server sends them. The contract takes the list together with those examples.
    codes = schemas["Response"]["properties"]["code"]["enum"]
    codes.extend(sorted(EXAMPLE_CODES - set(codes)))
    _add_parameter_errors(api)
    # OpenPAI's file repeats operation ids (``getJob`` twice), which a strict check of the
    # description refuses; the schemas themselves are what the contract is about.
    # text/yaml (a job's config, a submitted job) is read as YAML, which openapi-core does not do
    # by itself.
    config = Config(
        spec_validator_cls=None,
        extra_media_type_deserializers={"text/yaml": yaml.safe_load},
    )
    return OpenAPI.from_dict(_local_refs(api), config=config)


def _add_parameter_errors(api: dict[str, Any]) -> None:
    """OpenPAI's server checks the body of every route that takes one (``param.validate``,
    rest-server ``middlewares/parameter.js``) and answers 400 ``InvalidParametersError`` when it
    does not validate; the description gives that answer only on some of them (login, jobs,
    tags). It is added, as described elsewhere, to every operation with a body that lacks it."""
    for item in api["paths"].values():
        for operation in item.values():
            if isinstance(operation, dict) and "requestBody" in operation:
                operation["responses"].setdefault(
                    "400", {"$ref": "#/components/responses/InvalidParametersError"}
                )


@dataclass
class _Request:
    host_url: str
    path: str
    method: str
    parameters: RequestParameters
    content_type: str
    body: bytes | None


@dataclass
class _Response:
    status_code: int
    content_type: str
    data: bytes | None
    headers: Headers = field(default_factory=Headers)


def violations(response: httpx.Response) -> list[str]:
    """What in ``response`` (to an ``/api/v2`` request) the description does not allow."""
    request = response.request
    request.read()  # a request httpx made to follow a redirect has not been read yet
    url = request.url
    ours = _Request(
        host_url=f"{url.scheme}://{url.netloc.decode()}",
        path=url.path,
        method=request.method.lower(),
        parameters=RequestParameters(
            query=ImmutableMultiDict(list(url.params.multi_items())),
            header=Headers(list(request.headers.items())),
        ),
        content_type=request.headers.get("content-type", ""),
        body=request.content or None,
    )
    theirs = _Response(
        status_code=response.status_code,
        content_type=response.headers.get("content-type", "").split(";")[0].lower(),
        data=response.content or None,
        headers=Headers(list(response.headers.items())),
    )
    try:
        description().validate_response(ours, theirs)
    except Exception as exc:  # every kind of finding is one violation, said in full
        details = [str(exc)]
        cause = exc.__cause__
        for error in getattr(cause, "schema_errors", None) or []:
            details.append(f"  {'.'.join(map(str, error.absolute_path))}: {error.message}")
        return [f"{request.method} {url.path} -> {response.status_code}: " + "\n".join(details)]
    return []
