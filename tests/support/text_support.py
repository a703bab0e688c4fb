"""Independent Python versions of what gradrun's text path computes (spec/text_data.h,
train/text_gen.h, spec/random.h, kernels/gr_math.h), for tests/test_text_cli.py and
tests/test_words_transformer.py. Standard library only."""
import math
import struct

M64 = (1 << 64) - 1
GENERATE_STREAM = (1 << 32) + 2


def tokens_of(text, kind):
    """chars: each code point; words: runs of non-blanks (space, \\t, \\n, \\v, \\f, \\r)."""
    if kind == "chars":
        return list(text)
    out, cur = [], ""
    for ch in text:
        if ch in " \t\n\v\f\r":
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


def vocab_of(tokens):
    # byte-wise order of UTF-8 is code-point order, Python's str order
    return sorted(set(tokens))


def windows(ids, context):
    """Rows r = 0..n-1 with n = (L-1)//T: x = ids[rT:rT+T], y = ids[rT+1:rT+T+1]."""
    n = (len(ids) - 1) // context
    xs = [ids[r * context:r * context + context] for r in range(n)]
    ys = [ids[r * context + 1:r * context + context + 1] for r in range(n)]
    return xs, ys


def split(n, validation):
    """The last floor(validation*n) windows are the validation rows."""
    nv = math.floor(validation * n)
    return n - nv, nv


def _mix(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def random_unit(seed, stream, counter):
    return (_mix(_mix(_mix(seed) ^ stream) ^ counter) >> 11) * 2.0 ** -53


def _bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def _from_bits(b):
    return struct.unpack("<d", struct.pack("<Q", b & M64))[0]


def gr_exp(x):
    """fdlibm's exp as kernels/gr_math.h writes it: every step one correctly rounded double op
    (Python floats never fuse), so the result is gradrun's to the bit."""
    o_threshold = float.fromhex("0x1.62e42fefa39efp+9")
    u_threshold = -float.fromhex("0x1.74910d52d3051p+9")
    inv_ln2 = float.fromhex("0x1.71547652b82fep+0")
    shift = float.fromhex("0x1.8p52")
    ln2_hi = float.fromhex("0x1.62e42fee00000p-1")
    ln2_lo = float.fromhex("0x1.a39ef35793c76p-33")
    P1 = float.fromhex("0x1.555555555553ep-3")
    P2 = -float.fromhex("0x1.6c16c16bebd93p-9")
    P3 = float.fromhex("0x1.1566aaf25de2cp-14")
    P4 = -float.fromhex("0x1.bbd41c5d26bf1p-20")
    P5 = float.fromhex("0x1.6376972bea4d0p-25")
    if not (u_threshold <= x <= o_threshold):
        if x != x:
            return x
        return math.inf if x > 0 else 0.0
    t = x * inv_ln2 + shift
    k = _bits(t) - 0x4338000000000000
    kd = t - shift
    hi = x - kd * ln2_hi
    lo = kd * ln2_lo
    r = hi - lo
    r2 = r * r
    p4 = P4 + r2 * P5
    p3 = P3 + r2 * p4
    p2 = P2 + r2 * p3
    p1 = P1 + r2 * p2
    c = r - r2 * p1
    q = (r * c) / (2.0 - c)
    a = 1.0 + hi
    e = hi - (a - 1.0)
    y = a + (e + (q - lo))
    k1 = int(k / 2) if abs(k) < (1 << 52) else None  # truncation toward zero, as C++
    k2 = k - k1
    return (y * _from_bits((k1 + 1023) << 52)) * _from_bits((k2 + 1023) << 52)


def probabilities(z):
    m = max(z)
    e = [gr_exp(v - m) for v in z]
    s = 0.0
    for v in e:
        s += v
    return [v / s for v in e]


def sample(z, temperature, top_k, seed, step):
    """train/text_gen.h's sampler."""
    V = len(z)
    if temperature == 0:
        return max(range(V), key=lambda i: (z[i], -i))
    kept = list(range(V))
    if 0 < top_k < V:
        kept = sorted(sorted(kept, key=lambda i: (-z[i], i))[:top_k])
    m = max(z[i] for i in kept)
    w = [gr_exp((z[i] - m) / temperature) for i in kept]
    s = 0.0
    for v in w:
        s += v
    target = random_unit(seed, GENERATE_STREAM, step) * s
    c = 0.0
    for i, v in zip(kept, w):
        c += v
        if target < c:
            return i
    return kept[-1]
