"""Evidence a buyer can check: signing a finished run (`signing`), and `verify`, which checks the signature
and every digest and then rebuilds each item's rank answers from the record (`record/rebuild.py`) and judges them
again with the kinds' own judges and the profile kept with the run (`rejudge`); `commands` wires
`clustercheck sign` and `clustercheck verify`. The attestation's shape, the keys and the inputs kept with
a run live in `record/` (statement, attestation, keys, inputs, rebuild), which the run and the reports use."""
