#!/usr/bin/python3
"""Hit counts of cache policies on an access trace: the offline optimum
(Belady's MIN), LRU, and what dlfs's node cache does (keep the first samples
that fit, never evict). Sizes are per item (bytes); hits are counted in items
and in bytes.

    bench/cache/cache_model.py --samples 16000 --epochs 4 --budget 0.25 0.5 0.75

prints, per budget, the hit rate of each policy over epochs 2.. of shuffled
epochs (a fresh permutation per epoch, as dlfs's sampler makes): MIN and
first-fit are equal (each epoch reads each sample once, so no policy can
hit more than the cache holds), LRU far below. tests/python/test_node_cache.py
checks these functions on hand-made traces.
"""
import argparse
import heapq
import random

NEVER = float("inf")


def next_uses(trace):
    """For each position, the position of the next access to the same item."""
    nxt, last = [NEVER] * len(trace), {}
    for t in range(len(trace) - 1, -1, -1):
        nxt[t] = last.get(trace[t], NEVER)
        last[trace[t]] = t
    return nxt


def min_hits(trace, capacity, size=lambda item: 1):
    """Belady's MIN with bypass: on a miss, the item is admitted only if its
    next use comes before that of something cached, evicting the cached
    items used furthest in the future. Optimal for unit sizes; for varying
    sizes a close heuristic. Returns (hits, hit bytes)."""
    nxt = next_uses(trace)
    cached, used, heap = {}, 0, []  # item -> next use; heap of (-next use, item)
    hits = hit_bytes = 0
    for t, item in enumerate(trace):
        s = size(item)
        if item in cached:
            hits += 1
            hit_bytes += s
            cached[item] = nxt[t]
            heapq.heappush(heap, (-nxt[t], item))
            continue
        if s > capacity or nxt[t] == NEVER:
            continue
        victims = []
        while used + s > capacity and heap:
            neg, victim = heap[0]
            if cached.get(victim) != -neg:  # stale entry
                heapq.heappop(heap)
                continue
            if -neg <= nxt[t]:
                break  # everything cached is needed sooner: bypass
            heapq.heappop(heap)
            victims.append((victim, cached.pop(victim)))
            used -= size(victim)
        if used + s > capacity:  # bypass: put back what was taken out
            for victim, when in victims:
                cached[victim] = when
                used += size(victim)
                heapq.heappush(heap, (-when, victim))
            continue
        cached[item] = nxt[t]
        used += s
        heapq.heappush(heap, (-nxt[t], item))
    return hits, hit_bytes


def lru_hits(trace, capacity, size=lambda item: 1):
    """Least recently used, admitting every miss. Returns (hits, hit bytes)."""
    from collections import OrderedDict
    cached, used = OrderedDict(), 0
    hits = hit_bytes = 0
    for item in trace:
        s = size(item)
        if item in cached:
            hits += 1
            hit_bytes += s
            cached.move_to_end(item)
            continue
        if s > capacity:
            continue
        while used + s > capacity:
            _, gone = cached.popitem(last=False)
            used -= gone
        cached[item] = s
        used += s
    return hits, hit_bytes


def first_fit_hits(trace, capacity, size=lambda item: 1):
    """dlfs's node cache: admit while there is room, never evict. Stops
    admitting at the first item that does not fit (its bump allocator is
    full). Returns (hits, hit bytes)."""
    cached, used, full = set(), 0, False
    hits = hit_bytes = 0
    for item in trace:
        s = size(item)
        if item in cached:
            hits += 1
            hit_bytes += s
        elif not full:
            if used + s <= capacity:
                cached.add(item)
                used += s
            else:
                full = True
    return hits, hit_bytes


def shuffled_epochs(samples, epochs, seed=0):
    rng = random.Random(seed)
    trace = []
    for _ in range(epochs):
        order = list(range(samples))
        rng.shuffle(order)
        trace += order
    return trace


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=16000)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--budget", type=float, nargs="+", default=[0.25, 0.5, 0.75],
                   help="cache size as a share of the samples")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    trace = shuffled_epochs(a.samples, a.epochs, a.seed)
    later = a.samples * (a.epochs - 1)  # accesses after the first epoch
    print(f"{a.samples} samples, {a.epochs} shuffled epochs: hit rate over epochs 2..{a.epochs}")
    print(f"{'budget':>7} {'MIN':>7} {'dlfs':>7} {'LRU':>7}")
    for b in a.budget:
        c = int(a.samples * b)
        rates = [f(trace, c)[0] / later for f in (min_hits, first_fit_hits, lru_hits)]
        print(f"{b:>7.2f} " + " ".join(f"{r:>7.3f}" for r in rates))


if __name__ == "__main__":
    main()
