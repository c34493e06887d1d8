// A shared library that is not a Power model plugin: it exports no power_model_plugin().
extern "C" __attribute__((visibility("default"))) int something_else() {
  return 42;
}
