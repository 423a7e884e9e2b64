"""Developer tools used by the tests: the capture proxy and the golden-frame capture script."""
