"""The GPU's own state from NVIDIA's DCGM exporter (``dcgm-exporter``'s ``/metrics``).

GPU fleets are watched through dcgm-exporter (port 9400): one sample per GPU and field,
labelled ``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``, ... A GPU that lowers
its clocks (its power cap, a thermal slowdown, a power brake) slows every engine step; the
server's own metrics never say so. Read here, per scrape, over every GPU the page lists:

- ``sm_clock_mhz``: the lowest SM clock (``DCGM_FI_DEV_SM_CLOCK``);
- ``power_w``: the highest power draw (``DCGM_FI_DEV_POWER_USAGE``), ``temp_c`` the
  hottest GPU (``DCGM_FI_DEV_GPU_TEMP``);
- ``clock_events``: every GPU's clock event reasons OR-ed (``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``,
  called ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` before DCGM 4.0; NVML's bitmask, DCGM's
  ``DCGM_CLOCKS_EVENT_REASON_*``), of which ``SLOWING`` are the reasons that slow a busy
  GPU. dcgm-exporter's default counters file leaves this field out: add the line
  ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS, gauge, Clock event reasons.`` to yours;
- ``xid``: the last XID error any GPU reported (``DCGM_FI_DEV_XID_ERRORS``: a gauge of the
  error's code, 0 for none).

A field the exporter does not serve (its counters file leaves it out) is None, and so is a
DCGM "blank" marker (9223372036854775794: not supported) in place of a reading.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

GPU_PREFIX = "DCGM_FI_"  # every field dcgm-exporter serves
SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
POWER = "DCGM_FI_DEV_POWER_USAGE"
TEMPERATURE = "DCGM_FI_DEV_GPU_TEMP"
XID = "DCGM_FI_DEV_XID_ERRORS"
CLOCK_EVENTS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")

# NVML's clock event reasons (nvmlClocksEventReason*): the bits that lower a busy GPU's clock
CLOCK_EVENT_NAMES = {
    0x1: "idle",
    0x2: "application clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
}
SLOWING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
MAX_MASK = 2**32 - 1  # NVML's reasons are a 64-bit field with these low bits defined
# DCGM's "blank" values (not supported, not found, ...: DCGM_INT64_BLANK 0x7ffffffffffffff0
# and up, DCGM_FP64_BLANK 2**47 and up) are markers, never readings
NOT_A_READING = 2.0**47

Samples = Mapping[str, list[tuple[dict[str, str], float]]]


@dataclass(frozen=True)
class GpuState:
    """One scrape of a DCGM exporter, over every GPU it lists."""

    gpus: int
    sm_clock_mhz: float | None
    power_w: float | None
    temp_c: float | None
    clock_events: int | None
    xid: int | None

    def line(self) -> dict[str, object]:
        """The sample line's ``gpu`` fields; ``slowing`` names the slowing reasons set."""
        return {
            "gpus": self.gpus,
            "sm_clock_mhz": self.sm_clock_mhz,
            "power_w": self.power_w,
            "temp_c": self.temp_c,
            "clock_events": self.clock_events,
            "slowing": slowing_reasons(self.clock_events),
            "xid": self.xid,
        }


def is_dcgm(names: Mapping[str, object]) -> bool:
    """The page is a DCGM exporter's: some sample is one of its fields."""
    return any(name.startswith(GPU_PREFIX) for name in names)


def _values(samples: Samples, names: tuple[str, ...]) -> list[float]:
    """The finite values of the first of ``names`` the page has (one per GPU)."""
    for name in names:
        if name in samples:
            return [
                value
                for _, value in samples[name]
                if math.isfinite(value) and abs(value) < NOT_A_READING
            ]
    return []


def gpu_state(samples: Samples) -> GpuState:
    """The state of the GPUs one scrape lists."""
    clocks = [v for v in _values(samples, (SM_CLOCK,)) if v >= 0]
    powers = [v for v in _values(samples, (POWER,)) if v >= 0]
    temps = _values(samples, (TEMPERATURE,))
    events = [int(v) for v in _values(samples, CLOCK_EVENTS) if 0 <= v <= MAX_MASK]
    xids = [int(v) for v in _values(samples, (XID,)) if 0 <= v <= MAX_MASK]
    mask = 0
    for value in events:
        mask |= value
    gpus = {
        labels.get("gpu") or labels.get("UUID") for rows in samples.values() for labels, _ in rows
    }
    return GpuState(
        gpus=len(gpus - {None}),
        sm_clock_mhz=min(clocks) if clocks else None,
        power_w=max(powers) if powers else None,
        temp_c=max(temps) if temps else None,
        clock_events=mask if events else None,
        xid=max(xids) if xids else None,
    )


def slowing_reasons(mask: int | None) -> list[str]:
    """The names of the slowing reasons set in ``mask`` (NVML's bits)."""
    if not mask:
        return []
    return [name for bit, name in CLOCK_EVENT_NAMES.items() if bit & SLOWING and mask & bit]
