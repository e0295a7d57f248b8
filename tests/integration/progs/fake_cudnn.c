/* Names that start with "cu" but are not driver functions. */
int cudnnCreate(void **handle);
int cudnnCreate(void **handle) { *handle = (void *)0x1; return 0; }
int cublasCreate_v2(void **handle);
int cublasCreate_v2(void **handle) { *handle = (void *)0x2; return 0; }
