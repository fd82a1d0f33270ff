"""`make bench`: every benchmark module here with a `main()`, each printing its ratios."""
