#!/usr/bin/env python3
"""tiny_csv.py DIR [ROWS]: a small classification dataset in pstrain's CSV
format (label,x0..x15; 4 classes from the signs of the first features)
as DIR/train.csv (ROWS lines, default 4000) and DIR/test.csv (500), for
jobs of many tasks whose data must cost nothing (a 16-16-4 MLP on it has
340 parameters: enough to shard over several PS).  Same seed, same files."""
import os
import random
import sys

out = sys.argv[1]
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
os.makedirs(out, exist_ok=True)
r = random.Random(3)
for name, n in (("train.csv", rows), ("test.csv", 500)):
    with open(os.path.join(out, name), "w") as f:
        for _ in range(n):
            x = [r.uniform(-1, 1) for _ in range(16)]
            label = (x[0] > 0) * 2 + (x[1] + x[2] > 0)
            f.write("%d,%s\n" % (label, ",".join("%.4f" % v for v in x)))
