#include <stdio.h>
int chain_value(void);
int main(void)
{
    printf("chain_value=%d\n", chain_value());
    return chain_value() == 43 ? 0 : 1;
}
