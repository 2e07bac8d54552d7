"""The zigzag layout of a sequence (ring_attention_zigzag): balanced causal attention."""


def _order(world):
    """The chunks of the zigzag layout, in order: rank r's shard is chunks r and 2W - 1 - r."""
    return [c for rank in range(world) for c in (rank, 2 * world - 1 - rank)]


def _chunks(tensor, world, dim):
    extent = tensor.shape[dim]
    if extent % (2 * world):
        raise ValueError(f"a zigzag layout over {world} ranks needs a sequence of a multiple of "
                         f"{2 * world}, not {extent}")
    return tensor.tensor_split(2 * world, dim)


def zigzag(sequence, world, dim=2):
    """`sequence` (a torch tensor holding the whole sequence along `dim`) in the zigzag layout over
    `world` ranks: cut into 2 * world chunks of equal extent, rank r's shard, the r-th of `world`
    equal parts of the result (torch.tensor_split(result, world, dim)[r]), is chunk r followed by
    chunk 2 * world - 1 - r. Then every rank's queries see as many keys under a causal mask."""
    import torch

    chunks = _chunks(sequence, world, dim)
    return torch.cat([chunks[c] for c in _order(world)], dim)


def unzigzag(permuted, world, dim=2):
    """The sequence that zigzag(sequence, world, dim) laid out as `permuted`."""
    import torch

    chunks = _chunks(permuted, world, dim)
    ordered = [None] * (2 * world)
    for place, c in enumerate(_order(world)):
        ordered[c] = chunks[place]
    return torch.cat(ordered, dim)
