/*
 * fake_preload.c: an empty shared object that stands in for libtensorleak.so
 * in the `tensorleak run` tests, so they check the CLI's environment and exec
 * handling without depending on the real preload library being built.
 */
int tensorleak_cli_test_fake_preload;
