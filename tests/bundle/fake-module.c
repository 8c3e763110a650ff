/* fake-module.c: compiled three times (WHICH=1..3) into ELF objects standing in for kernel
 * modules, so the test can resolve dependencies from .modinfo "depends=" as setup does for a
 * kernel package that ships no modules.dep. */
#if WHICH == 1
#define INFO "depends=fake_b,fake-c"
#elif WHICH == 2
#define INFO "depends=fake_c"
#else
#define INFO "depends="
#endif

__attribute__((section(".modinfo"), used)) static const char modinfo[] =
        "license=GPL\0" INFO "\0vermagic=6.1.0-test SMP mod_unload modversions ";

int fake_module_symbol;
