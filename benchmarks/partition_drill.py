"""The partition drill's figures: `lifeboat_dr.flows.drills.partition.drill` (the product's
`lifeboat drill --kind partition`), run once from here.

    python -m benchmarks partition_drill
"""

from lifeboat_dr.flows.drills.partition.drill import main

if __name__ == "__main__":
    main()
