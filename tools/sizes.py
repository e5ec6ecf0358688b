"""Size arguments of the peer scripts, as gpucomm reads them (K, M, G:
powers of 1024), and the geometric sweep of `-b MIN -e MAX -f FACTOR`."""


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper()
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def sweep(lo, hi, factor):
    if factor < 2:
        raise SystemExit(f"factor {factor}: must be at least 2")
    sizes, s = [], parse_size(lo)
    while s <= parse_size(hi):
        sizes.append(s)
        s *= factor
    return sizes
