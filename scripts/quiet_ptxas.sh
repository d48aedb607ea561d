#!/usr/bin/env bash
# CUDA_COMPILER_LAUNCHER of the lab-only kernel variants (CMakeLists.txt): runs the compiler as given and drops
# ptxas's advisories that are expected there and nowhere else: the ablation variants of the wgmma attention
# (bench/attention_wgmma_variants.cu) are serialized on purpose (C7511, C7512, C7514: "wgmma.mma_async
# instructions are serialized"), which bench/results/README.md records. Every other line, and the exit status,
# pass through.
"$@" 2> >(grep -v -E 'ptxas info +: \(C751[124]\) Potential Performance Loss: wgmma\.mma_async instructions are serialized' >&2)
rc=$?
wait $! 2>/dev/null
exit $rc
