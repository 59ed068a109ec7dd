"""Storage settings for an `s3://` lake: the one place they are resolved, translated and named in errors.

Every entry point (the CLI, `run`, `Lake.open`, a `Storage` built anywhere) reaches an object store with
the settings `resolve` returns, in one order, per setting:

1. the explicit options (`storage_options=` or the release config's `lake.storage_options`);
2. the standard `AWS_*` variables, read as delta-rs/object_store and boto3 read them: `AWS_ENDPOINT_URL_S3`
   then `AWS_ENDPOINT_URL`, `AWS_REGION` then `AWS_DEFAULT_REGION`, `AWS_ALLOW_HTTP`, and the key pair
   `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN` (taken together, never mixed with
   explicit keys);
3. the profile (`AWS_PROFILE`, else `default`) of the shared files `~/.aws/credentials` and
   `~/.aws/config` (`AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`), for what is still missing: keys,
   region, endpoint_url. A profile named explicitly (`profile:` option) comes before the variables' keys,
   as a boto3 session given a profile name does.

The result uses the canonical `AWS_*` names, which deltalake, Polars and obstore all accept; pyarrow's S3
filesystem and DuckDB's S3 secret are built from it here. The values live in memory only: nothing here
writes them anywhere, and `hint` names a setting, never its value.
"""

from __future__ import annotations

import configparser
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .errors import InputError

ENDPOINT = "AWS_ENDPOINT_URL"
KEY_ID = "AWS_ACCESS_KEY_ID"
SECRET = "AWS_SECRET_ACCESS_KEY"
TOKEN = "AWS_SESSION_TOKEN"
REGION = "AWS_REGION"
ALLOW_HTTP = "AWS_ALLOW_HTTP"
PROFILE = "AWS_PROFILE"
SECRET_KEYS = (SECRET, TOKEN)
DEFAULT_REGION = "us-east-1"

# the spellings deltalake/object_store accept for each setting (case-insensitive) -> the canonical name
_ALIASES = {
    ENDPOINT: ("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint", "aws_endpoint_url_s3"),
    KEY_ID: ("aws_access_key_id", "access_key_id"),
    SECRET: ("aws_secret_access_key", "secret_access_key"),
    TOKEN: ("aws_session_token", "session_token", "aws_token", "token"),
    REGION: ("aws_region", "region", "aws_default_region"),
    ALLOW_HTTP: ("aws_allow_http", "allow_http"),
    PROFILE: ("aws_profile", "profile"),
}
_CANONICAL = {alias: name for name, aliases in _ALIASES.items() for alias in aliases}
_ENV = {ENDPOINT: ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"), REGION: ("AWS_REGION", "AWS_DEFAULT_REGION"),
        ALLOW_HTTP: ("AWS_ALLOW_HTTP",)}


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def canonical(options: Mapping[str, str] | None) -> dict[str, str]:
    """`options` with each known setting under its canonical `AWS_*` name (others kept as given)."""
    return {_CANONICAL.get(k.lower(), k): str(v) for k, v in (options or {}).items()}


def resolve(uri: str, options: Mapping[str, str] | None = None,
            environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The storage options for `uri`: explicit first, then the `AWS_*` variables, then the profile's files
    (module docstring). A local URI gets its options back unchanged. Resolving a result again gives it
    back (a `Storage` built from another's options). InputError (exit 2) names a profile that is in
    neither shared file and an http:// endpoint without `AWS_ALLOW_HTTP`."""
    if not is_s3(uri):
        return dict(options or {})
    env = os.environ if environ is None else environ
    out = canonical(options)
    explicit_profile = out.pop(PROFILE, None)
    for name, variables in _ENV.items():
        if not out.get(name):
            value = next((env[v] for v in variables if env.get(v)), None)
            if value:
                out[name] = value
    profile_name = explicit_profile or env.get(PROFILE) or None
    if not out.get(KEY_ID) and not explicit_profile and env.get(KEY_ID):
        out.update({k: env[k] for k in (KEY_ID, SECRET, TOKEN) if env.get(k)})
    if not out.get(KEY_ID) or not out.get(REGION) or not out.get(ENDPOINT):
        _from_profile(out, profile_name, env, named=bool(explicit_profile or env.get(PROFILE)))
    if out.get(ENDPOINT) and "://" not in out[ENDPOINT]:
        out[ENDPOINT] = "https://" + out[ENDPOINT]  # (a bare host is https; object_store needs the scheme)
    check(out)
    return out


def _from_profile(out: dict[str, str], name: str | None, env: Mapping[str, str], *, named: bool) -> None:
    """Fill what is missing from the profile `name` (else `default`) of the shared credentials and config
    files, as boto3 reads them: keys from either file, region and endpoint_url from the config file."""
    name = name or "default"
    home = Path(env.get("HOME") or Path.home())
    cred_file = Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials")
    conf_file = Path(env.get("AWS_CONFIG_FILE") or home / ".aws" / "config")
    creds = _section(cred_file, name)
    conf = _section(conf_file, name if name == "default" else f"profile {name}")
    if creds is None and conf is None:
        if named:
            raise InputError(f"AWS_PROFILE {name!r} is in neither {cred_file} nor {conf_file}: check AWS_PROFILE",
                             setting=PROFILE)
        return
    merged = {**(conf or {}), **(creds or {})}
    if not out.get(KEY_ID) and merged.get("aws_access_key_id"):
        out[KEY_ID] = merged["aws_access_key_id"]
        for key, name_ in (("aws_secret_access_key", SECRET), ("aws_session_token", TOKEN)):
            if merged.get(key):
                out[name_] = merged[key]
    if not out.get(REGION) and (conf or {}).get("region"):
        out[REGION] = (conf or {})["region"]
    if not out.get(ENDPOINT) and (conf or {}).get("endpoint_url"):
        out[ENDPOINT] = (conf or {})["endpoint_url"]


def _section(path: Path, name: str) -> dict[str, str] | None:
    parser = configparser.RawConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {str(exc).splitlines()[0]}; check AWS_PROFILE and that file",
                         setting=PROFILE) from None
    if not parser.has_section(name):
        return None
    return {k.lower(): v.strip() for k, v in parser.items(name) if v.strip()}


def truthy(value: str | None) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def check(options: Mapping[str, str]) -> None:
    """Settings object_store would refuse with an obscure error, refused here with the setting's name."""
    endpoint = options.get(ENDPOINT, "")
    if endpoint.lower().startswith("http://") and not truthy(options.get(ALLOW_HTTP)):
        raise InputError(f"the S3 endpoint {endpoint} is plain http: set AWS_ALLOW_HTTP=true to allow it"
                         " (or use https); check AWS_ENDPOINT_URL and AWS_ALLOW_HTTP", setting=ALLOW_HTTP)
    if options.get(KEY_ID) and not options.get(SECRET):
        raise InputError("AWS_ACCESS_KEY_ID is set without AWS_SECRET_ACCESS_KEY: check AWS_SECRET_ACCESS_KEY",
                         setting=SECRET)


# -- each client's form of the same settings --------------------------------------------------------------
def obstore_config(options: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """obstore's S3Store `config` and `client_options`."""
    opts = canonical(options)
    config: dict[str, Any] = {key: opts[name] for key, name in (
        ("endpoint", ENDPOINT), ("access_key_id", KEY_ID), ("secret_access_key", SECRET),
        ("session_token", TOKEN), ("region", REGION)) if opts.get(name)}
    config.setdefault("region", DEFAULT_REGION)
    return config, ({"allow_http": True} if truthy(opts.get(ALLOW_HTTP)) else None)


def _endpoint(opts: Mapping[str, str]) -> tuple[str, str] | None:
    """The endpoint's scheme and `host[:port][/path]` (https when it names none)."""
    endpoint = opts.get(ENDPOINT)
    if not endpoint:
        return None
    parsed = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
    return parsed.scheme, parsed.netloc + parsed.path.rstrip("/")


def pyarrow_s3_kwargs(options: Mapping[str, str]) -> dict[str, Any]:
    """Keyword arguments for pyarrow's S3FileSystem."""
    opts = canonical(options)
    scheme, host = _endpoint(opts) or ("https", None)
    return {"access_key": opts.get(KEY_ID), "secret_key": opts.get(SECRET), "session_token": opts.get(TOKEN),
            "region": opts.get(REGION, DEFAULT_REGION), "endpoint_override": host, "scheme": scheme}


def _sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def needs_aws_extension(options: Mapping[str, str]) -> bool:
    """DuckDB's S3 secret without keys uses the credential chain of its `aws` extension."""
    return not canonical(options).get(KEY_ID)


def duckdb_secret_sql(options: Mapping[str, str], name: str = "lake_s3") -> str:
    """`CREATE TEMPORARY SECRET` for DuckDB's httpfs and delta extensions: the same keys, region and
    endpoint (host:port, path-style URLs, `USE_SSL false` for an http endpoint); without keys, the aws
    extension's credential chain (instance role, SSO...: `needs_aws_extension`), checked on first use.
    Temporary: held in the connection's memory, never persisted."""
    opts = canonical(options)
    parts = ["TYPE s3", f"REGION {_sql_literal(opts.get(REGION, DEFAULT_REGION))}"]
    if opts.get(KEY_ID):
        parts += [f"KEY_ID {_sql_literal(opts[KEY_ID])}", f"SECRET {_sql_literal(opts.get(SECRET, ''))}"]
        if opts.get(TOKEN):
            parts.append(f"SESSION_TOKEN {_sql_literal(opts[TOKEN])}")
    else:
        parts += ["PROVIDER credential_chain", "VALIDATION 'none'"]
    endpoint = _endpoint(opts)
    if endpoint:
        parts += [f"ENDPOINT {_sql_literal(endpoint[1])}", "URL_STYLE 'path'",
                  f"USE_SSL {'false' if endpoint[0] == 'http' else 'true'}"]
    return f"CREATE TEMPORARY SECRET {name} ({', '.join(parts)})"


# -- errors -----------------------------------------------------------------------------------------------
_HINTS = (
    (re.compile(r"scheme is not allowed|allow_http", re.I), "AWS_ALLOW_HTTP"),
    (re.compile(r"InvalidAccessKeyId|access key id|ACCESS_DENIED|AccessDenied|Forbidden|\b403\b|"
                r"SignatureDoesNotMatch|signature|credential|InvalidToken|ExpiredToken|PermissionDenied"
                r"|UNAUTHORIZED|\b401\b", re.I),
     "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN or AWS_PROFILE"),
    (re.compile(r"NoSuchBucket|bucket does not exist|specified bucket", re.I), "the bucket in the lake URI"),
    (re.compile(r"region|AuthorizationHeaderMalformed|PermanentRedirect|\b301\b", re.I), "AWS_REGION"),
    (re.compile(r"resolve|dns|connect|NETWORK_CONNECTION|error sending request|timed? ?out|refused|"
                r"unreachable|curlCode|tcp|HTTP error", re.I), "AWS_ENDPOINT_URL"),
)


def hint(message: str) -> str | None:
    """The setting to check for a storage error's message, or None when it does not look like one."""
    return next((setting for pattern, setting in _HINTS if pattern.search(message)), None)


def redact(text: str, options: Mapping[str, str]) -> str:
    """`text` with every secret value of `options` replaced (an error message that echoes a request)."""
    for key in SECRET_KEYS:
        value = canonical(options).get(key)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


_REMOTE = re.compile(r"s3|aws|bucket|object.?store|https?://", re.I)
_CLIENT_ERRORS = ("DeltaError", "CommitFailedError", "DeltaProtocolError", "IOException", "HTTPException",
                  "GenericError", "PermissionDeniedError", "UnauthenticatedError", "ComputeError")


def is_storage_failure(exc: BaseException) -> bool:
    """An object-store client's error (pyarrow's OSError without an errno, deltalake, obstore, DuckDB,
    Polars) whose message says the store refused or did not answer: a setting to check, not a bug."""
    client = (isinstance(exc, OSError) and exc.errno is None) or type(exc).__name__ in _CLIENT_ERRORS
    return client and hint(str(exc)) is not None and _REMOTE.search(str(exc)) is not None


def storage_error(what: str, exc: BaseException, options: Mapping[str, str], **facts: Any) -> InputError:
    """A storage failure as one line (exit 2): what failed, the first line of the cause, the setting to
    check (`setting` fact too). Secrets are cut from the cause."""
    first = next((x.strip() for x in str(exc).splitlines() if x.strip()), type(exc).__name__)
    cause = redact(first.split("; Details")[0], options)[:300]
    setting = hint(str(exc)) or "AWS_ENDPOINT_URL, AWS_REGION and the credentials (AWS_* or AWS_PROFILE)"
    return InputError(f"{what}: {cause}; check {setting}", setting=setting, **facts)
