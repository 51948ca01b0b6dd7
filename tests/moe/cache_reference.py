"""A plain step-by-step reference of the expert-cache admit (``cache_ops`` rules 1-4), shared
by the op's property tests and the prefetching cache's hit test."""

import torch

from workbench.moe.cache_policies import LFU_COUNT_WEIGHT


def reference_admit(index, rows, slabs, slots, keys, requests, clock, policy, requested):
    """The admit rules written out one expert at a time, as plain Python (cache_ops rules 1-4)."""
    K, step = index.numel(), int(clock[0])
    flat = [int(e) for e in index.reshape(-1).tolist()]
    first = {e: n for n, e in reversed(list(enumerate(flat)))}
    ids = list(dict.fromkeys(flat))
    count = requests.tolist()
    if requested:
        for e in ids:
            count[e] += 1
    held, key = slots.tolist(), keys.tolist()
    where = {e: held.index(e) for e in ids if e in held}
    used = set(where.values())
    for e in ids:
        if e in where:
            continue
        s = min((i for i in range(len(held)) if i not in used), key=lambda i: (key[i], i))
        held[s], where[e] = e, s
        used.add(s)
        for r, slab in zip(rows, slabs):
            slab[s].copy_(r.reshape(K, *slab.shape[1:])[first[e]])
    weight = {"lru": 0, "lfu": LFU_COUNT_WEIGHT}[policy]
    for j, e in enumerate(ids):
        key[where[e]] = weight * count[e] + step * K + j
    slots.copy_(torch.tensor(held))
    keys.copy_(torch.tensor(key))
    requests.copy_(torch.tensor(count))
    clock.add_(1)
