// EXPECT_HYBRID_ERROR(statement, "text"): the statement throws hybrid::Error whose message contains
// the text.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "hybrid/core/error.h"

#define EXPECT_HYBRID_ERROR(statement, text)                                                  \
  do {                                                                                        \
    try {                                                                                     \
      statement;                                                                              \
      ADD_FAILURE() << #statement " did not throw; expected an error containing: " << (text); \
    } catch (const ::hybrid::Error& e_) {                                                     \
      EXPECT_NE(std::string(e_.what()).find(text), std::string::npos)                         \
          << "message: " << e_.what() << "\nexpected to contain: " << (text);                 \
    }                                                                                         \
  } while (0)
