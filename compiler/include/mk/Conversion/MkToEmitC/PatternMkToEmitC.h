//===- PatternMkToEmitC.h - the conversion's patterns, by op family -*- C++ -*-===//
//
// Each family of mk ops lowers in a file of its own (compiler/lib/Conversion/MkToEmitC), which
// adds its patterns through one populate function; mk-lower-to-emitc calls them all. A new op's
// lowering goes into the file of its family (or a new one, with its populate function here).
//
//===----------------------------------------------------------------------===//

#ifndef MK_CONVERSION_MKTOEMITC_PATTERNMKTOEMITC_H
#define MK_CONVERSION_MKTOEMITC_PATTERNMKTOEMITC_H

#include "mk/Conversion/MkToEmitC/KernelLayout.h"

#include "mlir/Transforms/DialectConversion.h"

namespace mlir::mk::to_emitc {

/// Place, owner and shard-range queries, loads, stores and puts of tiles, copies of regions.
void populateMemoryOpToEmitCPatterns(const TypeConverter &converter, RewritePatternSet &patterns,
                                     KernelLayout &layout);

/// Matmuls, reductions of received tiles, elementwise tile math and conversions.
void populateComputeOpToEmitCPatterns(const TypeConverter &converter, RewritePatternSet &patterns,
                                      KernelLayout &layout);

/// Expert routing: rows selected for the experts a rank holds, results combined per token.
void populateRoutingOpToEmitCPatterns(const TypeConverter &converter, RewritePatternSet &patterns,
                                      KernelLayout &layout);

/// Signals and waits on per-tile flags.
void populateSyncOpToEmitCPatterns(const TypeConverter &converter, RewritePatternSet &patterns,
                                   KernelLayout &layout);

} // namespace mlir::mk::to_emitc

#endif // MK_CONVERSION_MKTOEMITC_PATTERNMKTOEMITC_H
