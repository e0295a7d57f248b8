/* The definition at the end of the RTLD_NEXT chain. */
int chain_value(void);
int chain_value(void) { return 42; }
int chain_base_version(void);
int chain_base_version(void) { return 1; }
