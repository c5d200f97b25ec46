#!/bin/sh
# Kbuild-like workload: `make -j2` of a small generated C project, rebuilt in a loop.
# Usage: compile.sh [ROUNDS]   (default: loop until killed)
# Everything lives in a temporary directory that is removed on exit.
set -eu
rounds=${1:-0}
dir=$(mktemp -d /tmp/mmkit-compile.XXXXXX)
trap 'rm -rf "$dir"' EXIT INT TERM
cd "$dir"
for i in $(seq 1 24); do
    cat > "unit$i.c" <<C
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct item$i { int key; double value; char name[32]; };
static int cmp$i(const void *a, const void *b) {
    const struct item$i *x = a, *y = b;
    return (x->key > y->key) - (x->key < y->key);
}
double work$i(int n) {
    struct item$i *items = calloc((size_t)n, sizeof *items);
    double sum = 0;
    for (int k = 0; k < n; k++) {
        items[k].key = (k * 7919 + $i) % n;
        items[k].value = k * 0.5;
        snprintf(items[k].name, sizeof items[k].name, "item-%d-%d", $i, k);
    }
    qsort(items, (size_t)n, sizeof *items, cmp$i);
    for (int k = 0; k < n; k++) sum += items[k].value + (double)strlen(items[k].name);
    free(items);
    return sum;
}
C
done
{
    echo '#include <stdio.h>'
    for i in $(seq 1 24); do echo "double work$i(int n);"; done
    echo 'int main(void) { double s = 0;'
    for i in $(seq 1 24); do echo "s += work$i(1000);"; done
    echo 'return s > 0 ? 0 : 1; }'
} > main.c
objs=$(for i in $(seq 1 24); do printf 'unit%s.o ' "$i"; done)
printf 'CFLAGS=-O2 -g\nprog: main.o %s\n\t$(CC) -o $@ $^\nclean:\n\trm -f *.o prog\n' "$objs" > Makefile
n=0
while [ "$rounds" -eq 0 ] || [ "$n" -lt "$rounds" ]; do
    make -s clean
    make -s -j2 prog
    n=$((n + 1))
done
