/* stb_image_impl.c: stb_image's implementation in a translation unit of its own, so that the sanitizer build can
 * exempt this third-party code from UndefinedBehaviorSanitizer (CMakeLists.txt says why) while tprof's own image
 * code (image.c) keeps every check. AddressSanitizer covers both. */
/* Only the formats the folder filter admits are compiled in: less decoder surface fed with arbitrary files,
 * and a single file of another type fails the same way a folder would skip it. stb_image stays extern
 * (STB_IMAGE_STATIC makes this stb version warn about prototypes it never defines), so this must remain the
 * only file of the project that defines STB_IMAGE_IMPLEMENTATION (image.c includes the header alone). */
#define STB_IMAGE_IMPLEMENTATION
#define STBI_FAILURE_USERMSG /* "Image not of any known type, or corrupt" rather than "unknown image type" */
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wtype-limits"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wcast-qual"
#endif
#include <stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
