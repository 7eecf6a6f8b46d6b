// The parameter-server library, all of it: pstrain-ps(3).
//
//   #include <pstrain/ps.hpp>
//   c++ -std=c++20 my_program.cpp $(pkg-config --cflags --libs pstrain-ps)
#pragma once

#include <pstrain/bootstrap.hpp>
#include <pstrain/client.hpp>
#include <pstrain/error.hpp>
#include <pstrain/loopback.hpp>
#include <pstrain/optimizer.hpp>
#include <pstrain/partition.hpp>
#include <pstrain/server.hpp>
#include <pstrain/transport.hpp>
