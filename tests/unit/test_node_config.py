"""Scale-out config and CURVE key files: ``[[nodes]]``, a model's ``node``,
the ``mlxd node`` config, and key files written and read safely."""

from __future__ import annotations

import pytest
import zmq

from shared.config import ConfigError
from shared.config_loader import load_config, load_node_config
from shared.sockets import CurveKeyError, parse_key, read_key, read_key_pair, write_key_pair

KEY = zmq.curve_keypair()[0].decode()
NODES = f'[[nodes]]\nname = "mac2"\naddress = "tcp://10.0.0.2:5555"\npublic_key = "{KEY}"\n'
KEYS = '[server]\ncurve_public_key_file = "g.pub"\ncurve_secret_key_file = "g.key"\n'


def write(tmp_path, text):
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_gateway_with_a_node_loads(tmp_path):
    config = load_config(write(tmp_path, KEYS + '[[models]]\nname = "a"\nnode = "mac2"\n' + NODES))
    assert config.models[0].node == "mac2" and config.nodes[0].public_key == KEY
    assert config.nodes[0].memory_budget is None
    sized = load_config(write(tmp_path, KEYS + '[[models]]\nname = "a"\n' + NODES + 'memory_budget = "48GiB"\n'))
    assert sized.nodes[0].memory_budget == "48GiB"


@pytest.mark.parametrize(
    "text, needle",
    [
        (KEYS + '[[models]]\nname = "a"\nnode = "mac3"\n' + NODES, "no [[nodes]] entry named 'mac3'"),
        ('[[models]]\nname = "a"\nnode = "mac2"\n' + NODES, "needs server.curve_public_key_file"),
        (KEYS + '[[models]]\nname = "a"\n' + NODES.replace("tcp://", "ipc://"), "address must be tcp://"),
        (KEYS + '[[models]]\nname = "a"\n' + NODES.replace(KEY, "short"), "40-character Z85 key"),
        (KEYS + '[[models]]\nname = "a"\n' + NODES + NODES, "node name 'mac2' is used twice"),
        (KEYS + '[[models]]\nname = "a"\n' + NODES + 'memory_budget = "75%"\n', "not a percentage"),
        (KEYS + '[[models]]\nname = "a"\n' + NODES + 'memory_budget = "lots"\n', "memory_budget: not a size"),
    ],
)
def test_bad_node_entries_fail_with_one_line(tmp_path, text, needle):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert needle in str(info.value) and "\n" not in str(info.value)


NODE = f'[node]\nlisten = "tcp://127.0.0.1:5555"\npublic_key_file = "n.pub"\nsecret_key_file = "n.key"\nallowed_clients = ["{KEY}"]\n'


def test_node_config_loads(tmp_path):
    config = load_node_config(write(tmp_path, NODE + '[[models]]\nname = "a"\n'))
    assert config.node.allowed_clients == [KEY] and config.models[0].name == "a"


@pytest.mark.parametrize(
    "text, needle",
    [
        (NODE.replace("tcp://", "ipc://") + '[[models]]\nname = "a"\n', "node.listen must be tcp://"),
        (NODE.replace(f'["{KEY}"]', "[]") + '[[models]]\nname = "a"\n', "at least one gateway public key"),
        (NODE, "at least one [[models]]"),
        (NODE + '[[models]]\nname = "a"\nnode = "x"\n', "remove their `node` key"),
        (NODE + "[server]\n", "unknown field `server`"),
    ],
)
def test_bad_node_configs(tmp_path, text, needle):
    with pytest.raises(ConfigError) as info:
        load_node_config(write(tmp_path, text))
    assert needle in str(info.value)


def test_key_pair_files(tmp_path):
    public_path, secret_path = write_key_pair(tmp_path / "k", "n")
    assert secret_path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "k").stat().st_mode & 0o777 == 0o700
    pair = read_key_pair(str(public_path), str(secret_path))
    assert zmq.curve_public(pair.secret) == pair.public
    with pytest.raises(FileExistsError):
        write_key_pair(tmp_path / "k", "n")
    secret_path.chmod(0o644)
    with pytest.raises(CurveKeyError, match="chmod 600"):
        read_key(secret_path, secret=True)
    public_path.write_text("not a key")
    with pytest.raises(CurveKeyError, match="Z85"):
        read_key(public_path)
    with pytest.raises(CurveKeyError, match="cannot read"):
        read_key(tmp_path / "missing.pub")
    with pytest.raises(CurveKeyError):
        parse_key("x" * 39)
