"""Reading a configuration file and checking the rules msgspec cannot express.

:func:`load_config` (the gateway's file) and :func:`load_node_config` (an
``mlxd node``'s) read TOML into the Structs of :mod:`shared.config` and
apply :func:`validate`; every failure is a :class:`shared.config.ConfigError`
whose message is one line naming the file and the key. Runs on the
caller's thread; the only I/O is reading the file.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import TypeVar

import msgspec

from shared.config import (
    DRAFT_PREFIX,
    MODEL_KINDS,
    REASONING_PARSERS,
    SPECULATIVE_MODES,
    TOOL_PARSERS,
    Config,
    ConfigError,
    ImagesConfig,
    McpServerConfig,
    ModelConfig,
    NodeConfig,
    NodeEntry,
    ServerConfig,
    api_key_entries,
)
from shared.config_values import host_pattern, is_loopback, parse_duration, parse_network, parse_size
from shared.model_names import find_name

_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
_DTYPES = {"auto", "float32", "float16", "bfloat16", "quantized"}
_LOG_LEVELS = {"debug", "info", "warning", "error"}


MAX_VIDEO_BYTES = 48 * 1024 * 1024
"""The largest ``video_max_bytes``: what one request may carry to its
worker (the gateway's cap on a request's media, under the wire's frame
cap)."""


def validate(config: Config, origin: str = "config") -> Config:
    """Check cross-field rules msgspec cannot express; return ``config``.

    Raises:
        ConfigError: no models, duplicate names or aliases (also ``X`` and
            ``X:latest``, one name under :mod:`shared.model_names`), a bad dtype or
            log level, a non-loopback bind without API keys (unless
            ``allow_insecure_bind``), or a malformed ``[images]`` section.
    """
    if not config.models:
        raise ConfigError(f"{origin}: at least one [[models]] entry is required")
    seen: set[str] = set()
    for model in config.models:
        for name in (model.name, *model.aliases):
            if not _MODEL_NAME.fullmatch(name):
                raise ConfigError(f"{origin}: invalid model name {name!r} (letters, digits, . _ : / - only)")
            if name in seen:
                raise ConfigError(f"{origin}: model name {name!r} is used twice")
            twin = find_name(name, seen)
            if twin is not None:
                raise ConfigError(
                    f"{origin}: model names {twin!r} and {name!r} are one name (an untagged name means its :latest)"
                )
            seen.add(name)
        if model.tool_parser not in TOOL_PARSERS:
            raise ConfigError(f"{origin}: model {model.name!r}: tool_parser must be one of {list(TOOL_PARSERS)}")
        if model.reasoning_parser not in REASONING_PARSERS:
            raise ConfigError(
                f"{origin}: model {model.name!r}: reasoning_parser must be one of {list(REASONING_PARSERS)}"
            )
        try:
            parse_duration(model.ttl)
        except ValueError as exc:
            raise ConfigError(f"{origin}: model {model.name!r}: ttl: {exc}") from None
        if model.kind not in MODEL_KINDS:
            raise ConfigError(f"{origin}: model {model.name!r}: kind must be one of {list(MODEL_KINDS)}")
        try:
            parse_size(model.disk_cache_bytes, 0)
        except ValueError as exc:
            raise ConfigError(f"{origin}: model {model.name!r}: disk_cache_bytes: {exc}") from None
        try:
            video_bytes = parse_size(model.video_max_bytes, 0)
        except ValueError as exc:
            raise ConfigError(f"{origin}: model {model.name!r}: video_max_bytes: {exc}") from None
        if not 0 < video_bytes <= MAX_VIDEO_BYTES or str(model.video_max_bytes).strip().endswith("%"):
            raise ConfigError(f"{origin}: model {model.name!r}: video_max_bytes must be 1 byte to 48MiB")
        try:
            if parse_size(model.max_audio_bytes, 0) <= 0:
                raise ValueError("must be above 0")
        except ValueError as exc:
            raise ConfigError(f"{origin}: model {model.name!r}: max_audio_bytes: {exc}") from None
        draft = model.speculative.startswith(DRAFT_PREFIX) and model.speculative[len(DRAFT_PREFIX) :].strip()
        if model.speculative not in SPECULATIVE_MODES and not draft:
            raise ConfigError(
                f"{origin}: model {model.name!r}: speculative must be one of {', '.join(SPECULATIVE_MODES)}"
                f" or {DRAFT_PREFIX}<model name or source>"
            )
        if model.kv_budget != "auto":
            try:
                parse_size(model.kv_budget, 1 << 40)
            except ValueError as exc:
                raise ConfigError(f"{origin}: model {model.name!r}: kv_budget: {exc} (or auto)") from None
        if model.kv_bits not in (0, 4, 8):
            raise ConfigError(f"{origin}: model {model.name!r}: kv_bits must be 0, 4 or 8")
        if model.kv_group_size not in (32, 64, 128):
            raise ConfigError(f"{origin}: model {model.name!r}: kv_group_size must be 32, 64 or 128")
        if model.dtype not in _DTYPES:
            raise ConfigError(f"{origin}: model {model.name!r}: dtype must be one of {sorted(_DTYPES)}")
        _validate_tensor_parallel(model, f"{origin}: model {model.name!r}")
    _validate_mcp(config.mcp_servers, origin)
    _validate_nodes(config, origin)
    _validate_images(config.images, origin)
    if config.server.reasoning_field not in ("reasoning_content", "reasoning"):
        raise ConfigError(f"{origin}: server.reasoning_field must be reasoning_content or reasoning")
    try:
        parse_size(config.server.memory_budget, 1 << 40)
    except ValueError as exc:
        raise ConfigError(f"{origin}: server.memory_budget: {exc}") from None
    try:
        parse_size(config.server.log_max_bytes, 0)
    except ValueError as exc:
        raise ConfigError(f"{origin}: server.log_max_bytes: {exc}") from None
    if isinstance(config.server.log_max_bytes, str) and config.server.log_max_bytes.strip().endswith("%"):
        raise ConfigError(f"{origin}: server.log_max_bytes: a size, not a share")
    try:
        if parse_size(config.server.max_pull_bytes, 0) < 0 or str(config.server.max_pull_bytes).strip().endswith("%"):
            raise ValueError("a size such as 128GiB, or 0 for no cap (not a share)")
    except ValueError as exc:
        raise ConfigError(f"{origin}: server.max_pull_bytes: {exc}") from None
    if config.server.log_level not in _LOG_LEVELS:
        raise ConfigError(f"{origin}: server.log_level must be one of {sorted(_LOG_LEVELS)}")
    _validate_api_keys(config, origin)
    if not is_loopback(config.server.host) and not config.server.api_keys:
        if not config.server.allow_insecure_bind:
            raise ConfigError(
                f"{origin}: refusing to listen on {config.server.host} without api_keys "
                "(set server.allow_insecure_bind = true to override)"
            )
    _resolve_draft_models(config, origin)
    return config


def _resolve_draft_models(config: Config, origin: str) -> None:
    """Rewrite ``speculative = "draft:<name>"`` naming another ``[[models]]``
    entry (or alias, under the naming rule of every route:
    :func:`shared.model_names.find_name`) as ``draft:<that entry's source>``: the draft runs in
    the target's worker, which receives only its own model config. Any
    other ``draft:`` value is a source and is left as it is, so a second
    pass changes nothing.

    Raises:
        ConfigError: a model names itself as its draft, or a draft that
            sits on another machine (``node``) than the model it drafts for.
    """
    by_name = {name: m for m in config.models for name in (m.name, *m.aliases)}
    for i, model in enumerate(config.models):
        if not model.speculative.startswith(DRAFT_PREFIX):
            continue
        found = find_name(model.speculative[len(DRAFT_PREFIX) :].strip(), by_name)
        draft = by_name[found] if found is not None else None
        if draft is None:
            continue
        if draft is model:
            raise ConfigError(f"{origin}: model {model.name!r}: speculative names the model itself as its draft")
        if draft.node != model.node:
            raise ConfigError(
                f"{origin}: model {model.name!r}: its draft model {draft.name!r} is on another machine (node)"
            )
        config.models[i] = msgspec.structs.replace(model, speculative=DRAFT_PREFIX + draft.source)


_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _validate_api_keys(config: Config, origin: str) -> None:
    """Check ``server.api_keys``: no empty key, no key twice, names that are
    unique labels (letters, digits, ``. _ -``), ``models`` naming configured
    models or aliases (``tiny:latest`` names ``tiny``:
    :func:`shared.model_names.find_name`).

    Raises:
        ConfigError: naming the entry (by its name, never its key).
    """
    names: set[str] = set()
    keys: set[str] = set()
    models = {name for m in config.models for name in (m.name, *m.aliases)}
    for entry in api_key_entries(config.server):
        where = f"{origin}: server.api_keys entry {entry.name!r}"
        if not _KEY_NAME.fullmatch(entry.name):
            raise ConfigError(f"{where}: name must be letters, digits, . _ - (at most 64)")
        if entry.name in names:
            raise ConfigError(f"{where}: the name is used twice")
        if not entry.key.strip():
            raise ConfigError(f"{where}: the key is empty")
        if entry.key in keys:
            raise ConfigError(f"{where}: the same key is listed twice")
        names.add(entry.name)
        keys.add(entry.key)
        unknown = [m for m in entry.models if find_name(m, models) is None]
        if unknown:
            raise ConfigError(f"{where}: models names unknown model {unknown[0]!r}")


TENSOR_PARALLEL_BACKENDS = ("auto", "ring", "jaccl")
"""The values of ``tensor_parallel_backend``."""


def _validate_tensor_parallel(model: ModelConfig, where: str) -> None:
    """Check a model's ``tensor_parallel*`` keys (see ``ModelConfig``).

    Raises:
        ConfigError: an unknown backend; hosts that are not one IP address
            per rank (the ring backend needs addresses); both hosts and a
            hostfile; group keys without ``tensor_parallel`` > 1; a group
            for an embedding model or with a disk cache tier (every rank
            would write the same files); a missing port for a group that
            spans machines.
    """
    if model.tensor_parallel_backend not in TENSOR_PARALLEL_BACKENDS:
        raise ConfigError(f"{where}: tensor_parallel_backend must be one of {', '.join(TENSOR_PARALLEL_BACKENDS)}")
    hosts = model.tensor_parallel_hosts
    if model.tensor_parallel == 1:
        if hosts or model.tensor_parallel_hostfile:
            raise ConfigError(f"{where}: tensor_parallel_hosts and _hostfile need tensor_parallel > 1")
        return
    if hosts and model.tensor_parallel_hostfile:
        raise ConfigError(f"{where}: set tensor_parallel_hosts or tensor_parallel_hostfile, not both")
    if hosts and len(hosts) != model.tensor_parallel:
        raise ConfigError(
            f"{where}: tensor_parallel_hosts lists {len(hosts)} hosts for tensor_parallel = {model.tensor_parallel}"
        )
    for host in hosts:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(f"{where}: tensor_parallel_hosts: {host!r} is not an IP address") from None
    if model.tensor_parallel_port + model.tensor_parallel > 65535:
        raise ConfigError(f"{where}: tensor_parallel_port + tensor_parallel must stay below 65536")
    remote = bool(model.tensor_parallel_hostfile) or any(h != "127.0.0.1" for h in hosts)
    if remote and not model.tensor_parallel_port:
        raise ConfigError(f"{where}: a group across machines needs tensor_parallel_port (open in their firewalls)")
    if model.kind in ("embedding", "rerank", "speech"):
        raise ConfigError(f"{where}: tensor_parallel applies to generation models only")
    if parse_size(model.disk_cache_bytes, 0):
        raise ConfigError(f"{where}: tensor_parallel cannot be combined with disk_cache_bytes")


_MCP_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


def _validate_mcp(servers: list[McpServerConfig], origin: str) -> None:
    """Check the ``[[mcp_servers]]`` entries: valid unique names, exactly
    one transport, an ``http(s)`` URL.

    Raises:
        ConfigError: naming the entry and the rule it breaks.
    """
    seen: set[str] = set()
    for entry in servers:
        where = f"{origin}: mcp_servers {entry.name!r}"
        if not _MCP_NAME.fullmatch(entry.name):
            raise ConfigError(f"{where}: name must be a letter then letters, digits, _ or - (at most 64)")
        if entry.name in seen:
            raise ConfigError(f"{where}: name is used twice")
        seen.add(entry.name)
        if bool(entry.command) == bool(entry.url):
            raise ConfigError(f"{where}: set exactly one of command (stdio) or url (streamable HTTP)")
        if entry.url and not re.match(r"https?://[^/\s]+", entry.url):
            raise ConfigError(f"{where}: url must be http:// or https://")
        if entry.command and entry.headers:
            raise ConfigError(f"{where}: headers apply to a url server only")
        if entry.url and (entry.args or entry.env or entry.cwd):
            raise ConfigError(f"{where}: args, env and cwd apply to a command server only")


def _validate_images(images: ImagesConfig, origin: str) -> None:
    """Check ``[images]``: a positive ``max_bytes`` size, well-formed host
    patterns and networks, and some allowed host when ``remote_fetch`` is on.

    Raises:
        ConfigError: naming the key and the rule it breaks.
    """
    where = f"{origin}: images"
    try:
        max_bytes = parse_size(images.max_bytes, 0)
    except ValueError as exc:
        raise ConfigError(f"{where}.max_bytes: {exc}") from None
    if max_bytes <= 0 or (isinstance(images.max_bytes, str) and images.max_bytes.strip().endswith("%")):
        raise ConfigError(f"{where}.max_bytes: a positive size such as 20MiB (not 0, not a share)")
    for pattern in images.allowed_hosts:
        try:
            host_pattern(pattern)
        except ValueError as exc:
            raise ConfigError(f"{where}.allowed_hosts: {exc}") from None
    for cidr in images.allowed_networks:
        try:
            parse_network(cidr)
        except ValueError as exc:
            raise ConfigError(f"{where}.allowed_networks: {exc}") from None
    if images.remote_fetch and not images.allowed_hosts:
        raise ConfigError(
            f"{where}.remote_fetch is true but allowed_hosts is empty: list the hosts images may come from"
        )


def _validate_nodes(config: Config, origin: str) -> None:
    """Check ``[[nodes]]`` and the models placed on them (ConfigError)."""
    names = set()
    for node in config.nodes:
        if node.name in names:
            raise ConfigError(f"{origin}: node name {node.name!r} is used twice")
        names.add(node.name)
        if not node.address.startswith("tcp://"):
            raise ConfigError(f"{origin}: node {node.name!r}: address must be tcp://host:port")
        if len(node.public_key.strip()) != 40:
            raise ConfigError(f"{origin}: node {node.name!r}: public_key must be a 40-character Z85 key")
        _check_node_budget(node, origin)
    for model in config.models:
        if model.node and model.node not in names:
            raise ConfigError(f"{origin}: model {model.name!r}: no [[nodes]] entry named {model.node!r}")
    if config.nodes and not (config.server.curve_public_key_file and config.server.curve_secret_key_file):
        raise ConfigError(
            f"{origin}: [[nodes]] needs server.curve_public_key_file and server.curve_secret_key_file (mlxd keys)"
        )


def _check_node_budget(node: NodeEntry, origin: str) -> None:
    """A node's own ``memory_budget`` must be a size (ConfigError)."""
    value = node.memory_budget
    if value is None:
        return
    if isinstance(value, str) and value.strip().endswith("%"):
        raise ConfigError(
            f"{origin}: node {node.name!r}: memory_budget must be a size such as '48GiB', not a percentage"
        )
    try:
        parse_size(value, 0)
    except ValueError as exc:
        raise ConfigError(f"{origin}: node {node.name!r}: memory_budget: {exc}") from None


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read, decode and validate the TOML file at ``path``.

    Raises:
        ConfigError: the file is missing, is not TOML, has unknown keys or
            wrong types, or breaks a rule of :func:`validate`.
    """
    origin = str(path)
    config = _decode_file(path, Config)
    return validate(config, origin)


_T = TypeVar("_T")


def _decode_file(path: str | os.PathLike[str], kind: type[_T]) -> _T:
    """The TOML file at ``path`` decoded as ``kind`` (no rules checked).

    Raises:
        ConfigError: the file is unreadable, not TOML, or has unknown keys
            or wrong types (named by path).
    """
    origin = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{origin}: cannot read: {exc.strerror}") from exc
    try:
        return msgspec.toml.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{origin}: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{origin}: not valid TOML: {exc}") from exc


def load_node_config(path: str | os.PathLike[str]) -> NodeConfig:
    """Read, decode and validate an ``mlxd node`` config at ``path``.

    Raises:
        ConfigError: unreadable, not TOML, unknown keys or wrong types, no
            models, a ``listen`` that is not ``tcp://``, no allowed
            clients, or a model entry breaking :func:`validate`'s rules.
    """
    origin = str(path)
    config = _decode_file(path, NodeConfig)
    if not config.node.listen.startswith("tcp://"):
        raise ConfigError(f"{origin}: node.listen must be tcp://host:port")
    if not config.node.allowed_clients:
        raise ConfigError(f"{origin}: node.allowed_clients must list at least one gateway public key")
    if any(m.node for m in config.models):
        raise ConfigError(f"{origin}: a node's models run on the node itself; remove their `node` key")
    log_level = config.node.log_level
    validate(Config(server=ServerConfig(log_level=log_level), models=config.models), origin)
    return config
