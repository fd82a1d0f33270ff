"""`make bench`: every benchmark module here with a `main()`, each printing its figures.

Each goal a benchmark measures ends in one line of one format (benchmarks/_goals.py):

    GOAL <name>: PASS|FAIL <figure> vs <baseline> (<goal>)

`<name>` starts with the benchmark's module name, `<figure>` is this run's measurement,
`<baseline>` what it is compared with (measured in the same run where there is one), `<goal>`
the bar. `python -m benchmarks` tables every GOAL line of the run at its end and exits 1 when
one says FAIL (or a benchmark raised); `--quick` runs the smaller shapes.
"""
