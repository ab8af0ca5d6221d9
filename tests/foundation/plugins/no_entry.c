/* A shared object that is not a kiln plugin: it exports something, but not the entry symbol. */
__attribute__((visibility("default"))) int not_a_kiln_plugin(void) { return 42; }
