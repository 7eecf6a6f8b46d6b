// The parameter-server library, all of it: pstrain-ps(3).
//
//   #include <pstrain/ps.hpp>
//   c++ -std=c++20 my_program.cpp $(pkg-config --cflags --libs pstrain-ps)
#pragma once

#if __cplusplus < 202002L
#error "pstrain-ps needs C++20: compile with -std=c++20 (or later)"
#endif

#include <pstrain/activity.hpp>
#include <pstrain/bootstrap.hpp>
#include <pstrain/client.hpp>
#include <pstrain/embedding.hpp>
#include <pstrain/error.hpp>
#include <pstrain/loopback.hpp>
#include <pstrain/optimizer.hpp>
#include <pstrain/partition.hpp>
#include <pstrain/profile.hpp>
#include <pstrain/server.hpp>
#include <pstrain/settings.hpp>
#include <pstrain/transport.hpp>
#include <pstrain/wire_precision.hpp>
