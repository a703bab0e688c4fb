#!/usr/bin/python3
"""Writes datasets/moons.csv: two interleaving half circles with Gaussian noise (the "two moons" of
scikit-learn's make_moons), 400 points, noise 0.35, from a fixed seed — standard library only, so the
file can be regenerated anywhere: /usr/bin/python3 datasets/make_moons.py > datasets/moons.csv
"""
import math
import random

rng = random.Random(20261201)
print("x1,x2,label")
for i in range(400):
    label = rng.randrange(2)
    t = rng.uniform(0.0, math.pi)
    x, y = (math.cos(t), math.sin(t)) if label == 0 else (1.0 - math.cos(t), 0.5 - math.sin(t))
    print("%.6f,%.6f,%d" % (x + rng.gauss(0.0, 0.35), y + rng.gauss(0.0, 0.35), label))
