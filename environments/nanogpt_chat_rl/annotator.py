"""The judge's request as AlpacaEval makes it: the `alpaca_eval_llama3_70b_fn` annotator's files,
taken from the installed alpaca-eval package at build time (host side; build.py calls this).

METR's task asked its judge with this annotator's prompt and settings; rather than retyping them,
the build copies the annotator's prompt template byte for byte from the package into the home
folder's annotator/ and writes beside it (annotator.json) the settings that shape a request: the
temperature, the token limit, the parser's name, one pair per request in chat form. Which model
answers is the profile's gateway's (Llama-3-8B-Instruct on `paper`, as in METR's task), not the
annotator's (a Llama-3-70B endpoint). evaluation.py builds every judge request from these files,
on every profile; the tiny judge (judge.py) reads the same template to understand them.

The package is located, not imported: importing alpaca_eval runs its whole evaluation stack
(pandas, datasets, scipy; `pkg_resources`, which setuptools no longer ships) and reads a .env
file, while only its evaluator configs are needed. `pip install --no-deps alpaca-eval==0.6.6` is
enough for a build; the paper profile's requirements and the dev extra install it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

ANNOTATOR = "alpaca_eval_llama3_70b_fn"
DISTRIBUTION = "alpaca-eval"
VERSION = "0.6.6"
FOLDER = "annotator"
REQUEST_KEYS = ("max_tokens", "temperature", "requires_chatml")  # of completions_kwargs; the rest is the endpoint's


def package_configs() -> Path:
    """The installed alpaca-eval's evaluators_configs folder (the package is not imported);
    SystemExit saying what to install when it is missing or another version."""
    spec = importlib.util.find_spec("alpaca_eval")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"the judge's prompt comes from the {DISTRIBUTION} package, which is not installed here: "
                         f"pip install --no-deps {DISTRIBUTION}=={VERSION}")
    version = importlib.metadata.version(DISTRIBUTION)
    if version != VERSION:
        raise SystemExit(f"{DISTRIBUTION} {version} is installed; the judge's prompt is taken from {VERSION}: "
                         f"pip install --no-deps {DISTRIBUTION}=={VERSION}")
    return Path(next(iter(spec.submodule_search_locations))) / "evaluators_configs"


def annotator_config(configs: Path) -> dict[str, Any]:
    """The annotator's entry in its configs.yaml."""
    import yaml

    entry = yaml.safe_load((configs / ANNOTATOR / "configs.yaml").read_text(encoding="utf-8"))[ANNOTATOR]
    return dict(entry)


def write_annotator(home: Path, configs: Path | None = None) -> dict[str, Any]:
    """Copy the annotator's template into home/annotator/ and write annotator.json; returns it."""
    configs = configs or package_configs()
    entry = annotator_config(configs)
    template = configs / entry["prompt_template"]  # relative to the configs folder, as AlpacaEval reads it
    kwargs = entry.get("completions_kwargs", {})
    folder = home / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, folder / template.name)
    settings = {"annotator": ANNOTATOR, "source": f"{DISTRIBUTION} {VERSION}",
                "prompt_template": template.name,
                "template_sha256": hashlib.sha256(template.read_bytes()).hexdigest(),
                "fn_completion_parser": entry["fn_completion_parser"],
                "completion_parser_kwargs": entry.get("completion_parser_kwargs", {}),
                "batch_size": entry.get("batch_size", 1),
                **{key: kwargs[key] for key in REQUEST_KEYS if key in kwargs}}
    (folder / "annotator.json").write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    return settings
