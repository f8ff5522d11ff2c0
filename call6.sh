#!/usr/bin/env bash
cd .carry && tar xJf bin.tar.xz && cd ..
O=.carry/hybrid-ops
for pass in 1 2; do for m in 7 6 5; do echo "== pass $pass MINB=$m"; HYBRID_GDN_TILE_MINB=$m timeout 60 $O perf -b cuda -o gdn_recurrent:perf,gdn_prep_step:perf 2>&1 | grep "perf)" | cut -c1-175; done; done
for m in 6 5; do echo "== test MINB=$m"; HYBRID_GDN_TILE_MINB=$m timeout 60 $O test -b cuda -o gdn_recurrent,gdn_prep_step 2>&1 | tail -1; done
