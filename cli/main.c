/* main.c: placeholder until the CLI lands (see cli/). */
#include <stdio.h>
int main(void) { puts("tandem"); return 0; }
