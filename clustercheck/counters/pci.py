"""A PCI bus id, as the readers of this package meet it: one pattern for the kernel log's lines, sysfs's
device names and NVML's GPU names, so a form one reader takes is not one another drops.

Forms it accepts (`domain:bus:device[.function]`, hex digits in either case):

- the domain in 4 hex digits, as Linux prints it (`0000:17:00.0`), or more: 5 for an Intel VMD domain
  (`10000:e1:00.0`), 8 as NVML prints it (`00000000:9A:00.0`);
- with the function (`.0` to `.7`) or without it: NVRM's Xid names the GPU `PCI:0000:01:00`;
- upper or lower case (NVML and NVRM print upper case, sysfs lower); readers lower-case what they keep.

It matches the id alone: a caller anchors it (`fullmatch`, or in a pattern of its own)."""

from __future__ import annotations

import re

BUS_ID = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"
BUS_ID_RE = re.compile(BUS_ID)
