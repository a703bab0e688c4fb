#!/usr/bin/env python3
"""dist_model.py ALPHA_US BETA_US_PER_KB MODEL=P,S,T1_US ... — docs/distributed.md's cost model.

Predicts the step time of a sharded run on R = 1, 2, 4, ..., S processes (R dividing S, at most 64)
from the one-process step time T1 (all S shards and the optimizer, measured), the parameter count
P and the message costs alpha (latency, us) and beta (us per KB) that bench_comm fits:

    T(R) = T1/R + 2(R-1)alpha + beta*8P(R-1)/R*(S/R + 1) + 2(R-1)alpha
           (compute split R ways; all-to-all and all-gather; the norm chain and the losses)

It assumes R cores (this machine has 2) and that compute divides evenly; both collectives are
modelled as R-1 pairwise messages.
"""
import sys


def predict(alpha, beta_kb, P, S, T1, R):
    beta = beta_kb / 1024.0
    k = S // R
    moved = 8.0 * P * (R - 1) / R
    return T1 / R + 2 * (R - 1) * alpha + beta * moved * (k + 1) + 2 * (R - 1) * alpha


def main():
    alpha, beta_kb = float(sys.argv[1]), float(sys.argv[2])
    print("model            P       S   " + "".join("%9s" % ("R=%d" % r) for r in (1, 2, 4, 8, 16, 32, 64)) + "   (us per step)")
    for arg in sys.argv[3:]:
        name, rest = arg.split("=")
        P, S, T1 = rest.split(",")
        P, S, T1 = int(P), int(S), float(T1)
        cells = []
        for R in (1, 2, 4, 8, 16, 32, 64):
            cells.append("%9.0f" % predict(alpha, beta_kb, P, S, T1, R) if S % R == 0 else "%9s" % "-")
        print("%-14s %7d %5d   %s" % (name, P, S, "".join(cells)))


if __name__ == "__main__":
    main()
