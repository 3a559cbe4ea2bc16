"""The sensitivity grid: where P/D disaggregation beats the best colocated plan, and by what net
margin per request (0x0FD), over workload, topology, fault and price coordinates.

Modules: :mod:`.spec` (the grid file and ``--vary``), :mod:`.coordinates` (a cell's coordinates
applied to the inputs), :mod:`.margin` (ΔT and its terms from simulations), :mod:`.cell` (both
modes planned and verified, the decision), :mod:`.grid` (running cells locally or on Ray) and
:mod:`.summary` (the outcome in words).
"""

from pdplan.sensitivity.cell import DECISIONS, Base, CellResult, run_cell
from pdplan.sensitivity.grid import EXECUTORS, GridResult, cell_coordinates, check_executor, run_grid
from pdplan.sensitivity.margin import Margin, net_margin
from pdplan.sensitivity.spec import DIMENSIONS, GridSpec, load_spec, parse_vary, with_vary
from pdplan.sensitivity.summary import summary_text

__all__ = [
    "DECISIONS", "DIMENSIONS", "EXECUTORS", "Base", "CellResult", "GridResult", "GridSpec", "Margin",
    "cell_coordinates", "check_executor", "load_spec", "net_margin", "parse_vary", "run_cell", "run_grid",
    "summary_text", "with_vary",
]
