# The example programs' command lines (examples/common/cli.hpp, on CLI11), run as a user would:
# every program's --help and --version, llama.cpp's flags, --flag=value, and the messages and
# exit status 2 of bad values. tests/expect_run.sh checks the exit status and regexes over
# stdout and stderr. Included from tests/CMakeLists.txt when the examples are built; the chat
# cases need the shared fixture.
set(HLLM_RUN ${CMAKE_CURRENT_SOURCE_DIR}/expect_run.sh)
set(HLLM_CLI_DATA ${CMAKE_CURRENT_SOURCE_DIR}/cli)
set(HLLM_KJV ${PROJECT_SOURCE_DIR}/models/kjv-llama.gguf)
set(HLLM_FX ${HLLM_SHARED_DIR}/fixtures/fx-gqa-q8_0.gguf)
set(gen $<TARGET_FILE:hllm-generate>)
set(chat $<TARGET_FILE:hllm-chat>)
set(tok $<TARGET_FILE:hllm-tokenize>)

foreach(program hllm-generate hllm-chat hllm-perplexity hllm-tokenize hllm-info hllm-logits
                hllm-convert hllm-bench hllm-batched-bench)
  add_test(NAME ${program}_help COMMAND sh ${HLLM_RUN} 0 "Usage: ${program} .*--version" EMPTY -
    $<TARGET_FILE:${program}> --help)
  add_test(NAME ${program}_version COMMAND sh ${HLLM_RUN} 0
    "^${program} \\(hllm\\) [0-9]+\\.[0-9]+\\.[0-9]+" EMPTY - $<TARGET_FILE:${program}> --version)
  # An unknown flag: the program's name first, status 2, nothing on stdout.
  add_test(NAME ${program}_unknown_flag COMMAND sh ${HLLM_RUN} 2 EMPTY
    "^${program}: The following argument was not expected: --frobnicate.*--help"
    - $<TARGET_FILE:${program}> --frobnicate)
endforeach()

# hllm_cli_case(NAME STATUS STDOUT_REGEX STDERR_REGEX STDIN COMMAND ARGS...): one run of a
# program, checked by expect_run.sh. One call per case rather than a list of cases: the regexes
# hold unbalanced brackets, across which CMake's lists do not split.
function(hllm_cli_case name status out err input)
  add_test(NAME hllm_cli_${name} COMMAND sh ${HLLM_RUN} ${status} "${out}" "${err}" ${input}
    ${ARGN})
  set_tests_properties(hllm_cli_${name} PROPERTIES TIMEOUT 90)
endfunction()

# Bad values: the flag, what it expects in words, the value given.
hllm_cli_case(generate_top_p_negative 2 "EMPTY"
  "^hllm-generate: --top-p must be a probability above 0 and at most 1 \\(1: off\\), got '-5'"
  - ${gen} --top-p -5)
hllm_cli_case(generate_threads_negative 2 "EMPTY"
  "^hllm-generate: -t must be a number of threads from 1 to 512, got '-5'"
  - ${gen} -t -5)
hllm_cli_case(generate_threads_equals_zero 2 "EMPTY"
  "-t must be a number of threads from 1 to 512, got '0'"
  - ${gen} --threads=0)
hllm_cli_case(generate_n_below_minus_1 2 "EMPTY"
  "-n must be a number of tokens, or -1 for no limit, got '-2'"
  - ${gen} -n -2)
hllm_cli_case(generate_seed_word 2 "EMPTY"
  "--seed must be a whole number from 0 to [0-9]+, or -1 for a random seed, got 'abc'"
  - ${gen} -s abc)
hllm_cli_case(generate_missing_value 2 "EMPTY"
  "^hllm-generate: --n-predict needs a value"
  - ${gen} -n)
hllm_cli_case(generate_prompt_and_file 2 "EMPTY"
  "give -p PROMPT or -f FILE, not both"
  - ${gen} -p x -f ${HLLM_CLI_DATA}/prompt.txt)
hllm_cli_case(chat_bad_template 2 "EMPTY"
  "^hllm-chat: --chat-template must be llama2, llama3, chatml, zephyr or a template file, got 'nope'"
  - ${chat} -m ${HLLM_KJV} --chat-template nope)
hllm_cli_case(chat_needs_model 2 "EMPTY"
  "^hllm-chat: --model is required"
  - ${chat})
hllm_cli_case(perplexity_short_window 2 "EMPTY"
  "^hllm-perplexity: -c must be a number of tokens from 4 to"
  - $<TARGET_FILE:hllm-perplexity> -m ${HLLM_KJV} -f ${HLLM_CLI_DATA}/prompt.txt -c 2)
hllm_cli_case(info_needs_file 2 "EMPTY"
  "^hllm-info: FILE is required"
  - $<TARGET_FILE:hllm-info>)
hllm_cli_case(logits_bad_mode 2 "EMPTY"
  "^hllm-logits: --mode must be prefill or decode, got 'both'"
  - $<TARGET_FILE:hllm-logits> -m ${HLLM_KJV} --tokens-file ${HLLM_CLI_DATA}/prompt.txt -o out.f32 --mode both)
hllm_cli_case(convert_needs_output 2 "EMPTY"
  "^hllm-convert: --output is required"
  - $<TARGET_FILE:hllm-convert> -i ${HLLM_KJV})
hllm_cli_case(bench_bad_output 2 "EMPTY"
  "^hllm-bench: -o must be md or json, got 'xml'"
  - $<TARGET_FILE:hllm-bench> --preset tiny -o xml)
hllm_cli_case(tokenize_two_inputs 2 "EMPTY"
  "give one of -p TEXT, -f FILE and --stdin"
  - ${tok} -m ${HLLM_KJV} -p x --stdin)
# More threads than cores: allowed, with a warning (-n 0 generates nothing).
hllm_cli_case(generate_threads_above_cores 0 "-"
  "^hllm-generate: warning: -t 512 is more threads than this machine's [0-9]+ cores"
  - ${gen} -t 512 -n 0)
# --flag=value, -f/--file, -e.
hllm_cli_case(generate_flag_equals 0 "^In the beginning"
  "generated: 4 tokens"
  - ${gen} "--prompt=In the beginning" --n-predict=4 --temp=0 --threads=2)
hllm_cli_case(generate_prompt_file 0 "^In the beginning"
  "prompt: 6 tokens"
  - ${gen} --file=${HLLM_CLI_DATA}/prompt.txt -n 2 -t 2)
hllm_cli_case(generate_escapes 0 "^In the beginning"
  "-"
  - ${gen} -e -p "In\\x20the beginning" -n 0 --log-disable)
hllm_cli_case(generate_no_display_prompt 0 "!beginning"
  "generated: 3 tokens"
  - ${gen} --no-display-prompt -n 3 -t 2)
# -n -1 runs until the context is full and still prints its statistics, status 0.
hllm_cli_case(generate_until_context_end 0 "^In the beginning"
  "generated: 28 tokens, [0-9.]+ tokens/s \\(stopped: the context is full\\).*peak memory"
  - ${gen} -n -1 -c 32 --ignore-eos -t 2)
# --seed -1: a random seed, printed so that the run can be repeated.
hllm_cli_case(generate_random_seed 0 "-"
  "seed: [0-9]+ \\(random\\)"
  - ${gen} --seed -1 -n 2 -t 2)
hllm_cli_case(generate_json 0 "-"
  "^\\{\"load_s\": [0-9.]+, \"prompt_tokens\": 5, .*\"generated_tokens\": 3, .*\"stop_reason\": \"max_tokens\", .*\\}.$"
  - ${gen} --json --log-disable -n 3 -t 2)
hllm_cli_case(generate_log_disable 0 "^In the beginning"
  "EMPTY"
  - ${gen} --log-disable -n 2 -t 2)
# -i: a line from stdin continues the same sequence: 5 prompt tokens, then the undecoded last
# token and the line's 5 ("In the beginning\n" without BOS).
hllm_cli_case(generate_interactive 0 "In the beginning.*In the beginning"
  "prompt: 11 tokens"
  ${HLLM_CLI_DATA}/prompt.txt ${gen} -i -n 1 --temp=0 -t 2)
# -cnv: a chat in the model's format (--chat-template here: the bundled model has none), the
# prompt as the system message, a line of stdin per message, each turn's speed on stderr.
hllm_cli_case(generate_conversation 0 "^[^[]+$"
  "chat format: chatml.*\\[prompt [0-9]+ tokens, [0-9.]+ tokens/s. reply 4 tokens, [0-9.]+ tokens/s\\].\\[[0-9]+ of 256 context tokens used\\]"
  ${HLLM_CLI_DATA}/prompt.txt ${gen} -cnv --chat-template chatml -p "Answer briefly." -n 4 --temp=0 -t 2)
hllm_cli_case(generate_conversation_needs_a_format 1 "EMPTY"
  "^hllm-generate: .*chat template.*pass --chat-template llama2.llama3.chatml.zephyr"
  ${HLLM_CLI_DATA}/prompt.txt ${gen} -cnv -n 4 -t 2)
# The context: 4096 unless the model's is shorter (the bundled model's is 256), -c 0 the model's,
# and the KV cache type chosen at run time.
hllm_cli_case(generate_default_context 0 "-"
  "\"context\": 256, .*\"kv_type\": \"f32\""
  - ${gen} --json --log-disable -n 1 -t 2)
hllm_cli_case(generate_context_zero_is_the_models 0 "-"
  "\"context\": 256,"
  - ${gen} --json --log-disable -n 1 -c 0 -t 2)
hllm_cli_case(generate_context_and_kv_type 0 "-"
  "\"context\": 100, .*\"kv_type\": \"q8_0\""
  - ${gen} --json --log-disable -n 1 -c 100 --kv-type q8_0 -t 2)
hllm_cli_case(generate_bad_kv_type 2 "EMPTY"
  "^hllm-generate: --kv-type must be f32, f16, bf16, q8_0, q4_0 or fp8, got 'q5_1'"
  - ${gen} --kv-type q5_1)
# -np N: N sequences of the prompt through the engine, seeds -s, -s + 1, ...; not with -i/-cnv.
hllm_cli_case(generate_parallel 0
  "^--- sequence 1 \\(seed 42, .*--- sequence 2 \\(seed 43, .*--- sequence 3 \\(seed 44, "
  "parallel: 3 sequences of a 5-token prompt.*generated: 12 tokens in all"
  - ${gen} -np 3 -n 4 -t 2)
hllm_cli_case(generate_parallel_not_interactive 2 "EMPTY"
  "^hllm-generate: -np and --context-shift run the engine: not with -i or -cnv"
  - ${gen} --parallel 2 -i)
# --context-shift: 60 tokens through a 32-token context, keeping the first 2.
hllm_cli_case(generate_context_shift 0 "."
  "generated: 60 tokens in all.*context shifts: [1-9]"
  - ${gen} --context-shift --keep 2 -c 32 -n 60 --ignore-eos -t 2)
# hllm-batched-bench: one JSON object per configuration; -pps shares the prompt's blocks.
hllm_cli_case(batched_bench_json 0
  "^\\{\"model\": \"tiny \\(synthetic\\)\", .*\"npp\": 32, \"ntg\": 4, \"npl\": 1, .*\"tg_tokens_per_s\": [0-9.]+, .*\\}.\\{.*\"npl\": 3, .*\"kv_bytes\": [1-9][0-9]*, \"shared_prompt\": false"
  "EMPTY"
  - $<TARGET_FILE:hllm-batched-bench> --preset tiny -npp 32 -ntg 4 -npl 1,3 -o json --log-disable -t 2)
hllm_cli_case(batched_bench_shared_prompt 0 "^model: tiny .*shared prompt.*\\| 32 \\| 4 \\| 4 \\| 144 \\|"
  "EMPTY"
  - $<TARGET_FILE:hllm-batched-bench> --preset tiny -npp 32 -ntg 4 -npl 4 -pps --log-disable -t 2)
hllm_cli_case(batched_bench_bad_list 2 "EMPTY"
  "^hllm-batched-bench: -npl must be a comma-separated list of numbers from 1 to 65536, got '1,x'"
  - $<TARGET_FILE:hllm-batched-bench> --preset tiny -npl 1,x)
# hllm-tokenize: -p TEXT, and stdin when no input is named.
hllm_cli_case(tokenize_prompt 0 "^1 1040 261 1801 1247.$"
  "EMPTY"
  - ${tok} -m ${HLLM_KJV} -p "In the beginning")
hllm_cli_case(tokenize_stdin 0 "^1 1040 261 1801 1247 13.$"
  "EMPTY"
  ${HLLM_CLI_DATA}/prompt.txt ${tok} -m ${HLLM_KJV})
hllm_cli_case(tokenize_stdin_flag 0 "^1040 261 1801 1247 13.$"
  "EMPTY"
  ${HLLM_CLI_DATA}/prompt.txt ${tok} -m ${HLLM_KJV} --stdin --no-bos)
if(EXISTS ${HLLM_FX})
  # Blank lines are not sent: one turn, the same 27 tokens as "Hello" alone.
  hllm_cli_case(chat_skips_blank_lines 0 "-"
    "^([^[]*\\[prompt 27 tokens[^[]*)\\[27 of 256 context tokens used\\]"
    ${HLLM_CLI_DATA}/blank_lines.txt ${chat} -m ${HLLM_FX} --chat-format zephyr -n 1 -c 256 -t 2)
  # A message longer than what is left is refused, and the next one is answered.
  hllm_cli_case(chat_refuses_too_long_message 0 "-"
    "that message takes [0-9]+ tokens, and only [0-9]+ of the context's 128 are left. it was not sent.*\\[prompt [0-9]+ tokens.*\\[[0-9]+ of 128 context tokens used\\]"
    ${HLLM_CLI_DATA}/short_then_long.txt ${chat} -m ${HLLM_FX} --chat-format zephyr -n 4 -c 128 -t 2)
  # Each turn's speed, and a chat template read from a file.
  hllm_cli_case(chat_template_file 0 "-"
    "chat format: chatml.*\\[prompt [0-9]+ tokens, [0-9.]+ tokens/s. reply [0-9]+ tokens, [0-9.]+ tokens/s\\]"
    ${HLLM_CLI_DATA}/prompt.txt ${chat} -m ${HLLM_FX} --chat-template=${HLLM_CLI_DATA}/chatml.jinja -n 4 -c 128 -t 2)
endif()

# Progress of long work goes to stderr, so stdout keeps only the data. Away from a terminal it
# is plain lines with no carriage return ('\r' redraws one line on a terminal only): NL below is
# a line end that is not '\r'. --log-disable leaves stderr empty.
string(ASCII 13 HLLM_CR)
set(NL "[^[:print:]${HLLM_CR}]")
set(convert $<TARGET_FILE:hllm-convert>)
set(bench $<TARGET_FILE:hllm-bench>)
# A line per tensor, 57 of them in the bundled model's order.
hllm_cli_case(convert_progress_lines 0 "^wrote [^ ]*progress-q8_0.gguf: Q8_0 weights, 6 layers"
  "^quantizing  1/57 token_embd\\.weight${NL}(quantizing [ 0-9]{2}/57 blk\\.[0-5]\\.[a-z_]+\\.weight${NL}){54}quantizing 56/57 output_norm\\.weight${NL}quantizing 57/57 output\\.weight${NL}$"
  - ${convert} -i ${HLLM_KJV} -o ${CMAKE_CURRENT_BINARY_DIR}/progress-q8_0.gguf --type q8_0)
hllm_cli_case(convert_progress_f32 0 "^wrote .*: F32 weights"
  "^converting  1/57 token_embd\\.weight${NL}.*converting 57/57 output\\.weight${NL}$"
  - ${convert} -i ${HLLM_KJV} -o ${CMAKE_CURRENT_BINARY_DIR}/progress-f32.gguf --type f32)
hllm_cli_case(convert_log_disable 0 "^wrote [^ ]*progress-quiet.gguf: Q4_0 weights" "EMPTY"
  - ${convert} -i ${HLLM_KJV} -o ${CMAKE_CURRENT_BINARY_DIR}/progress-quiet.gguf --type q4_0
    --log-disable)
# hllm-bench: which test of how many runs, and which run of it; the table alone on stdout (it
# holds no '['). The bundled model loads too fast for a load line (those wait half a second).
hllm_cli_case(bench_progress_lines 0
  "^read bandwidth [^[]*\\| pp8 \\|[^[]*\\| tg4 \\|[^[]*$"
  "^measuring read bandwidth and arithmetic peaks${NL}\\[1/2\\] pp8 F16 t=2: warm-up${NL}\\[1/2\\] pp8 F16 t=2: run 1/1${NL}\\[2/2\\] tg4 F16 t=2: warm-up${NL}\\[2/2\\] tg4 F16 t=2: run 1/1${NL}measuring read bandwidth again${NL}$"
  - ${bench} -m ${HLLM_KJV} -p 8 -n 4 -r 1 -t 2)
hllm_cli_case(bench_log_disable 0 "^\\[.*\"test\": \"tg4\"" "EMPTY"
  - ${bench} -m ${HLLM_KJV} -p 0 -n 4 -r 1 -t 2 -o json --log-disable)
