"""tune/: one problem's tune from cache lookup to stored entry. tuner.py drives it (lookup,
choices, search, runner, pick, store); hits.py is the cache lookup a command makes before
starting anything; progress.py keeps a running tune's results and saves partial entries;
report.py draws its progress and summary.

The top of the tuning machinery: imports candidates/, search/, runner/ and store/, and is
imported by the commands (cli/), torch.compile's routing and scaleout/ only.
"""
