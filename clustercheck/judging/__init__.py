"""What is good enough and whether a result is: limits and the threshold profiles they come from (the
spec table, its expression grammar, derived profiles, the search path), probe expectations, platform
detection from each node's facts, measurements and verdicts, and the judging of one item."""
