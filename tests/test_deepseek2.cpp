// deepseek2 (placeholder while the architecture is built).
#include <gtest/gtest.h>
