"""The simulator's ``GET /dcgm/metrics``: its one GPU as NVIDIA's dcgm-exporter shows one.

In engine mode (``--profile``) the engine can plant throttle episodes (``throttle_prob``,
``throttle_ms``, ``throttle_factor``: every step in one costs that many times as much, as a
GPU held to its power cap runs its clocks lower). This page says what a DCGM exporter beside
a real server would: the SM clock (``NOMINAL_SM_CLOCK_MHZ``, divided by the factor while
throttled), the clock event reasons (``SW_POWER_CAP`` while throttled, else 0), power and
temperature (made up, higher while throttled), no XID error. Field names, HELP texts and
labels as dcgm-exporter writes them (its ``etc/default-counters.csv``, its label template in
``internal/pkg/rendermetrics/render_metrics.go``), the clock event reasons field added as a
user's counters file would. Its truth is the step lines' ``throttle_ns``.
"""

from __future__ import annotations

from .prometheus import escape_label, format_value

NOMINAL_SM_CLOCK_MHZ = 1980.0  # an H100/H200's boost clock
SW_POWER_CAP = 0x4  # NVML's clock event reason bit
POWER_W = (550.0, 700.0)  # calm, throttled (made up: a capped GPU sits at its limit)
TEMP_C = (58.0, 71.0)
FIELDS = (  # name, HELP (dcgm-exporter's), the value calm, throttled
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", None),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", TEMP_C),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", POWER_W),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", (0.0, 0.0)),
    (
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "Current clock event reasons (bitmask).",
        (0.0, float(SW_POWER_CAP)),
    ),
)


def render_dcgm(throttled: bool, factor: float, profile: str) -> bytes:
    """The page for a GPU that is (or is not) throttled now, by ``factor``."""
    model = escape_label(f"tpot-locust simulator ({profile})")
    labels = (
        'gpu="0",UUID="GPU-00000000-7907-51a0-0000-000000000000",pci_bus_id="00000000:00:00.0",'
        f'device="nvidia0",modelName="{model}",Hostname="tpot-sim"'
    )
    out: list[str] = []
    for name, help_text, values in FIELDS:
        if values is None:
            value = NOMINAL_SM_CLOCK_MHZ / factor if throttled else NOMINAL_SM_CLOCK_MHZ
        else:
            value = values[throttled]
        out += [
            f"# HELP {name} {help_text}",
            f"# TYPE {name} gauge",
            f"{name}{{{labels}}} {format_value(round(value, 3))}",
        ]
    return ("\n".join(out) + "\n").encode()
