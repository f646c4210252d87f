#include "gpt_model.h"
