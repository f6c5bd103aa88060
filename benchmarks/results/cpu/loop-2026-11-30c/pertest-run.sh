#!/bin/bash
out=$1; shift; shift
cg=/sys/fs/cgroup/cpuacct/pertest$$
mkdir $cg
echo $$ > $cg/tasks
export CGCPU_GROUP=$cg CGCPU_OUT=$out
start=$(date +%s.%N)
"$@" -p cgcpu
rc=$?
echo "rc=$rc wall=$(echo "$(date +%s.%N) - $start" | bc) cpu=$(echo "$(cat $cg/cpuacct.usage) / 1000000000" | bc -l)"
