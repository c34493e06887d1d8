#include "format/gguf.h"
