"""The documented generator (lib/spec/random.h) and validation split (lib/spec/dataset.h), in Python,
so CLI tests can recompute which rows gradrun trains and validates on.

    from documented_split import mix64, permutation, split
"""
import math

M64 = (1 << 64) - 1


def mix64(z):
    """SplitMix64's finalizer over z + the golden gamma (lib/spec/random.h)."""
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def permutation(n, seed):
    """random_permutation(n, seed, kSplitStream): Fisher-Yates from the last position down."""
    p = list(range(n))
    for i in range(n - 1, 0, -1):
        j = mix64(mix64(mix64(seed) ^ (1 << 32)) ^ i) % (i + 1)
        p[i], p[j] = p[j], p[i]
    return p


def split(n, seed, validation):
    """(training rows, validation rows), each ascending: the first floor(validation * n) of the permutation validate."""
    p = permutation(n, seed)
    n_val = math.floor(validation * n)
    return sorted(p[n_val:]), sorted(p[:n_val])
