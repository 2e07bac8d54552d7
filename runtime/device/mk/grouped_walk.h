//===- mk/grouped_walk.h - the tiles of a grid bounded by row counts -------------------===//
//
// A tile grid over [groups, rows, columns] whose group g holds counts[g] rows (at most
// `capacity`; an expert's routed rows) visits only the tiles that hold rows: group by group, in
// the order the rows arrive, each group's tiles in bands of `band` row tiles walked column by
// column (the grid's swizzle; 1 is row-major). CTA c of n takes positions c, c + n, ... of the
// walk, so that the CTAs share the tiles there are, not those the capacity allows.
//
// The device library walks it in generated kernels and mk-sim runs it on the host: this one
// definition keeps the two from disagreeing.
//
//===------------------------------------------------------------------------------------===//

#ifndef MK_GROUPED_WALK_H
#define MK_GROUPED_WALK_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define MK_GROUPED_WALK_FN __host__ __device__ __forceinline__
#else
#define MK_GROUPED_WALK_FN inline
#endif

namespace mk {

/// A tile of the walk: its group, row tile and column tile.
struct GroupedTile {
  int group, row, col;
};

struct GroupedWalk {
  const int *counts;
  int groups, capacity, tile_rows, col_tiles, band;

  /// The row tiles of group g: its rows, at most the capacity, in tiles of tile_rows.
  MK_GROUPED_WALK_FN int row_tiles(int g) const {
    const int count = counts[g];
    const int rows = count < 0 ? 0 : count < capacity ? count : capacity;
    return (rows + tile_rows - 1) / tile_rows;
  }

  /// The number of tiles to walk: the groups' row tiles, each a row of col_tiles.
  MK_GROUPED_WALK_FN long long positions() const {
    long long rows = 0;
    for (int g = 0; g < groups; ++g)
      rows += row_tiles(g);
    return rows * col_tiles;
  }

  /// The tile at position p, 0 <= p < positions(); past the end, no tile (row and col -1, the
  /// last group), which the walk's loops skip (mk::tile_within): a CTA never waits for a tile that
  /// no CTA makes, as a persistent scheduler's invalid work tile. (It reads only the counts.)
  MK_GROUPED_WALK_FN GroupedTile at(long long p) const {
    int g = 0;
    long long tiles = static_cast<long long>(row_tiles(0)) * col_tiles;
    while (p >= tiles && g + 1 < groups) {
      p -= tiles;
      tiles = static_cast<long long>(row_tiles(++g)) * col_tiles;
    }
    if (p >= tiles)
      return GroupedTile{g, -1, -1};
    const int rows = row_tiles(g);
    const long long per_band = static_cast<long long>(band) * col_tiles;
    const int first = static_cast<int>(p / per_band) * band;
    const int in_band = static_cast<int>(p % per_band);
    const int band_rows = rows - first < band ? rows - first : band;
    return GroupedTile{g, first + in_band % band_rows, in_band / band_rows};
  }
};

} // namespace mk

#undef MK_GROUPED_WALK_FN

#endif // MK_GROUPED_WALK_H
