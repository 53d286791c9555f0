"""rebench as a library: what `rebench run`, `envs build|calibrate|noise|show`, `report` and `import` do.

The command line is a thin shell over these functions: it parses options, calls one of
them and prints what comes back. Scripts, notebooks and tests call them directly:

    from rebench import api
    from rebench.agents.base import AgentConfig

    spec = api.CampaignSpec(environments=["triton_cumsum"], agent=AgentConfig(name="reference"),
                            budget_s="10m", k=2, backend="local")
    result = api.run_campaign(spec, db="results/rebench.db")
    print(result.campaign_id, [o.status for o in result.outcomes])

One campaign, in the order `run_campaign` does it:

    1. validate     environments, profile, what the profile needs here (GPUs, operator assets:
                    rebench.preflight), agent (and its script), model key, backend:
                    a RebenchError here, before anything is built or written
    2. build        each environment's virtualenv and assets (and image on docker), cached by content hash
    3. recover      attempts left `running` by a harness that died are marked `interrupted`
    4. calibrate    timing environments on hardware without calibrated anchors: measure them first
    5. plan         the campaign row and all its queued attempt rows, in one transaction (`resume`:
                    the campaign's interrupted tries re-queued instead, rebench.scheduler.resume)
    6. run          CampaignRunner (rebench/campaign.py) leases CPU slots and GPUs (durable leases and
                    the backfill queue of rebench.scheduler; docs/scheduling.md) and retries an
                    infrastructure failure once; each attempt is AttemptRunner.run (rebench/runner.py):
                    sandbox -> install -> baseline score (paused) -> agent under the hard timer
                    -> snapshot -> [re-score the best solutions, final_score = "rescore_best"]
                    -> final score -> final attempt row

Long calls say what they are doing through an `Observer` (callbacks, all optional).
Every function that takes `db` accepts an open `Store`, a path, or None for the
default database (`$REBENCH_DB` or results/rebench.db); a store opened here is closed here.
Results as pandas DataFrames are in `rebench.analysis`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import lazy_loader

from rebench.agents.base import AgentConfig
from rebench.attempt_outcome import AttemptOutcome
from rebench.store.opening import open_store, using_store

if TYPE_CHECKING:
    from rebench.campaign import CampaignSpec
    from rebench.campaign_service import resume_campaign, run_campaign
    from rebench.env_service import (
        anchors_in_use,
        build_environment,
        calibrate,
        choose_backend,
        measure_noise,
        noise_measured,
    )
    from rebench.human.service import HumanAttemptInfo, HumanStart
    from rebench.observer import CalibrationResult, CampaignResult, Observer, PlannedCampaign
    from rebench.report.importer import ImportSummary
    from rebench.report.rows import Report
    from rebench.store.db import Store

__all__ = [
    "AgentConfig",
    "AttemptOutcome",
    "CalibrationResult",
    "CampaignResult",
    "CampaignSpec",
    "Observer",
    "PlannedCampaign",
    "anchors_in_use",
    "attach_human",
    "build_environment",
    "calibrate",
    "choose_backend",
    "human_attempts",
    "import_metr_runs",
    "measure_noise",
    "noise_measured",
    "open_store",
    "report",
    "resume_campaign",
    "run_campaign",
    "start_human",
    "stop_human",
    "using_store",
]

# The campaign machinery (runner, sandboxes, environment builds: about 0.1 s) loads on first use of
# one of its names, as rebench.gateway's and rebench.agents' do: `rebench report`, `import` and
# scripts that only read results do not need it.
_lazy_getattr, _lazy_dir, _lazy_names = lazy_loader.attach("rebench", submod_attrs={
    "campaign": ["CampaignSpec"],
    "campaign_service": ["resume_campaign", "run_campaign"],
    "env_service": ["anchors_in_use", "build_environment", "calibrate", "choose_backend", "measure_noise",
                    "noise_measured"],
    "observer": ["CalibrationResult", "CampaignResult", "Observer", "PlannedCampaign"],
})


def __getattr__(name: str) -> object:
    try:
        return _lazy_getattr(name)
    except AttributeError:  # lazy_loader names the package, not this module
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def report(db: Store | Path | str | None = None, *, campaigns: Sequence[int] = (),
           environments: Sequence[str] = (), agents: Sequence[str] = (), source: str | None = None,
           estimator: str = "expected_max", n_bootstrap: int | None = None, seed: int | None = None,
           budgets: str | Sequence[str] = "30m,2h,8h,16h,32h", at: str = "8h",
           exclude_above: float | None = None, strict: bool = False, rescored: int | None = None) -> Report | None:
    """Score@k per agent and total time budget, with bootstrap intervals and the human comparison;
    None when no finished attempt matches the filters. Options are those of `rebench report`;
    `rebench.report.render` prints or writes the result, `rebench.analysis.score_at_k` makes it a DataFrame.
    `rescored`: a `rebench rescore` run; its re-scores are counted, the original scores shown beside."""
    from rebench.report.bootstrap import DEFAULT_N_BOOTSTRAP, DEFAULT_SEED
    from rebench.report.data import Filters
    from rebench.report.service import make_report, settings_from_options

    filters = Filters(campaigns=campaigns, environments=environments, agents=agents, source=source)
    settings = settings_from_options(estimator, DEFAULT_N_BOOTSTRAP if n_bootstrap is None else n_bootstrap,
                                     DEFAULT_SEED if seed is None else seed, budgets, at, exclude_above,
                                     strict)
    with using_store(db, read_only=True) as store:
        return make_report(store, filters, settings, rescored=rescored)


def import_metr_runs(path: Path | str, *, db: Store | Path | str | None = None,
                     allow_empty: bool = False) -> ImportSummary:
    """Import the RE-Bench rows of METR's run-level export; runs already imported (by run id) are skipped.
    The whole file is validated before the database is opened, so a bad file writes nothing."""
    from rebench.report.importer import read_metr_runs, store_metr_runs

    export = read_metr_runs(Path(path), allow_empty=allow_empty)
    with using_store(db) as store:
        return store_metr_runs(store, export)


def start_human(environment: str, *, name: str, key: Path | str, profile: str = "tiny", budget: str = "8h",
                bind: str = "127.0.0.1", port: int = 0, gpus: Sequence[int] = (),
                db: Store | Path | str | None = None, foreground: bool = False) -> HumanStart:
    """Start a human expert attempt over SSH (rebench.human): every input is checked before a row is
    written; returns once the expert can connect (its `ssh_command`), with the attempt supervised by
    a detached process (`foreground`: by this one, returning when the attempt ended)."""
    from rebench.human.service import start_human as start

    with using_store(db) as store:
        return start(store, environment=environment, profile=profile, budget=budget, name=name, key=Path(key),
                     bind=bind, port=port, gpus=list(gpus), foreground=foreground)


def human_attempts(db: Store | Path | str | None = None) -> list[HumanAttemptInfo]:
    """Every human attempt: its state, working time used and left, and whether its supervisor runs."""
    from rebench.human.service import list_humans

    with using_store(db, read_only=True) as store:
        return list_humans(store)


def stop_human(attempt_id: int, reason: str | None = None, *, db: Store | Path | str | None = None) -> HumanAttemptInfo:
    """End a human attempt (status done, its work scored), reattaching first if its supervisor died."""
    from rebench.human.service import stop_human as stop

    with using_store(db) as store:
        return stop(store, attempt_id, reason)


def attach_human(attempt_id: int, *, db: Store | Path | str | None = None) -> HumanStart:
    """A new supervisor for a running human attempt whose supervisor died; returns once it serves again."""
    from rebench.human.service import attach_human as attach

    with using_store(db) as store:
        return attach(store, attempt_id)
