"""Bounds on everything a user can hand pdplan: file sizes, counts and physical ranges.

Every input is checked against these where it enters, so no input can make pdplan read without
end, work without end, or overflow the simulator's 64-bit integer arithmetic. README lists them;
an input beyond one is an error that names the file (or flag), the line and the field.
"""

MIB = 2**20
GIB = 2**30

#: Largest file each kind of input may be (a bigger one, or one that is not a regular file, is refused).
YAML_BYTES = 16 * MIB           #: cluster, plan, SLO, model, profile, GPU catalog
JSON_BYTES = 64 * MIB           #: DistServe profiler JSON
TABLE_BYTES = 256 * MIB         #: measured points (Splitwise CSV, points CSV, Dynamo npz), benchmark results
TRACE_BYTES = 4 * GIB           #: request traces (CSV or JSONL)

#: Tokens one request may have in its prompt or output. With at most MAX_TRACE_REQUESTS
#: requests, every token sum the simulator forms stays below 2**63.
MAX_TOKENS_PER_REQUEST = 10_000_000
MAX_TRACE_REQUESTS = 200_000_000
MAX_TRACE_SECONDS = 1e10        #: arrival times (about 300 years)

MAX_RATE_RPS = 1e6              #: any request rate a flag or file states
MAX_PIPELINE_STAGES = 1_000     #: pipeline stages of one instance
MAX_SEED = 2**31 - 1            #: seeds reach numpy and CP-SAT, whose seed is a 32-bit integer
MAX_SYNTH_REQUESTS = 10_000_000
MAX_REQUESTS_PER_PROBE = 1_000_000
MAX_GRID_POINTS = 1_000
MAX_CONCURRENCY = 1_000_000     #: clients of a closed loop
MAX_CHECKS = 1_000              #: end-to-end checks per search
MAX_RUNS = 100                  #: verification runs
MAX_JOBS = 256                  #: worker processes
MAX_RUN_S = 86_400.0            #: seconds a verification run is asked to last (a day)
MAX_TIME_LIMIT_S = 3_600.0      #: CP-SAT time per solve

MAX_USD_PER_HOUR = 1e9          #: budgets
MAX_USD_PER_GPU_HOUR = 1e4      #: prices of one GPU
MAX_GPUS_PER_INSTANCE_STAGE = 72  #: tensor-parallel degree (one NVLink domain)
MAX_WATTS = 1e10
MAX_GPUS = 10_000_000
MAX_KV_TOKENS = 2**40           #: KV capacity or a prefill batch of one instance
MAX_LATENCY_MS = 1e9            #: any latency coefficient or threshold in milliseconds
MAX_BANDWIDTH_GB_S = 1e6
MAX_NODES = 1_000_000           #: nodes of one type
MAX_PUE = 10.0
MAX_ENERGY_USD_PER_KWH = 100.0

#: The default bound of any integer or number read from a YAML file without a tighter one.
MAX_INTEGER = 2**53
MAX_NUMBER = 1e15
YAML_VALUES = 2_000_000         #: values of one YAML document, aliases expanded (a 16 MiB file spells out ~1.5 million)
MIN_BANDWIDTH_GB_S = 1e-3       #: 1 MB/s: slower, one 1,000-token request's KV (0.3 GB on llama2-70b) takes minutes
MAX_BENCH_REQUESTS = 10_000_000  #: requests one serving-benchmark result may report
MAX_BENCH_RUNS = 100              #: benchmark runs one calibration replays (a file may append several)
MAX_GRID_CELLS = 1_000          #: cells of one sensitivity grid (each plans both modes, verified end to end)
MAX_DIURNAL_PERIODS = 1_000     #: day curves one synthetic trace spans (each is sampled at 4,096 points)
RAY_CONNECT_S = 5.0             #: seconds a Ray cluster's --address has to accept a connection
