"""The price table: dollars per million tokens and context windows, per model.

Prices change and gateways charge differently, so the table is a file, not
code: the bundled `prices.toml` plus an optional override file whose entries
replace the bundled ones key by key.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from rebench.errors import ConfigError

BUNDLED_PRICES = Path(__file__).with_name("prices.toml")
PRICES_ENV_VAR = "REBENCH_PRICES"
DEFAULT_CONTEXT_WINDOW = 128_000


class ModelPrice(BaseModel, extra="forbid"):
    """What one model costs; None means unknown (cost then cannot be accounted)."""

    input_per_mtok: float | None = Field(None, ge=0)
    cached_input_per_mtok: float | None = Field(None, ge=0)
    cache_write_per_mtok: float | None = Field(None, ge=0)
    output_per_mtok: float | None = Field(None, ge=0)
    context_window: int | None = Field(None, gt=0)

    @property
    def priced(self) -> bool:
        return self.input_per_mtok is not None and self.output_per_mtok is not None

    def cost_usd(
        self, input_tokens: int, output_tokens: int, cached_tokens: int = 0, cache_write_tokens: int = 0
    ) -> float:
        """Cost of one call. `input_tokens` counts every prompt token, cached or not."""
        if self.input_per_mtok is None or self.output_per_mtok is None:
            return 0.0
        cached_price = self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok
        write_price = self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok
        plain = max(0, input_tokens - cached_tokens - cache_write_tokens)
        dollars = (
            plain * self.input_per_mtok
            + cached_tokens * cached_price
            + cache_write_tokens * write_price
            + output_tokens * self.output_per_mtok
        )
        return dollars / 1_000_000


def _read_table(path: Path) -> dict[str, ModelPrice]:
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"price table {str(path)!r} not found") from exc
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"price table {str(path)!r} is not valid TOML: {exc}") from exc
    models = raw.get("models", {})
    if not isinstance(models, dict):
        raise ConfigError(f"price table {str(path)!r}: [models] must be a table of tables")
    table: dict[str, ModelPrice] = {}
    for name, entry in models.items():
        try:
            table[name] = ModelPrice.model_validate(entry)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ConfigError(f"price table {str(path)!r}: model {name!r} field {where!r}: {first['msg']}") from exc
    return table


def load_prices(override: str | Path | None = None) -> dict[str, ModelPrice]:
    """Bundled prices, updated by `override` or else the file named by $REBENCH_PRICES."""
    table = _read_table(BUNDLED_PRICES)
    extra = override or os.environ.get(PRICES_ENV_VAR) or None
    if extra:
        for name, price in _read_table(Path(extra)).items():
            base = table.get(name, ModelPrice())
            table[name] = base.model_copy(update=price.model_dump(exclude_unset=True))
    return table


def price_for(model: str, override: str | Path | None = None) -> ModelPrice:
    """The price entry for `provider/model`, or an empty (unknown) one."""
    return load_prices(override).get(model, ModelPrice())
