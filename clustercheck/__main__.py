from clustercheck.cli import entry

entry()
