/* attach_noabi: a library without the attach entry points, which attach
 * must refuse and unload again. */
int attach_noabi_marker(void)
{
    return 1;
}
