#pragma once
// HLLM_TEST_SANITIZED is 1 in a build under AddressSanitizer or ThreadSanitizer, whose
// allocators abort on requests no machine could satisfy (instead of failing them) and whose
// shadow memory makes address-space and resident-size limits meaningless. g++ says so with
// __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__, clang with __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HLLM_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HLLM_TEST_SANITIZED 1
#endif
#endif
#ifndef HLLM_TEST_SANITIZED
#define HLLM_TEST_SANITIZED 0
#endif
