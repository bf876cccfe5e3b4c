"""The run record and what reads it: its shape (`schema`), writing and reading it (`io`), the lines about
items (`entries`), comparing runs (`compare`), the exclusion list and drain (`exclude`) and burn-in
summaries (`burnin`)."""
